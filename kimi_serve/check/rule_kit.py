"""What every profile rule is (:data:`Rule`: a profile and its launch in, findings out) and how it says pass or names
the profile key (file:line) that fails, with the fix."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from kimi_serve.core.findings import FAIL, PASS, Finding
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile

Rule = Callable[[Profile, Launch], Iterator[Finding]]


def ok(name: str, message: str) -> Finding:
    return Finding("rules", name, PASS, message)


def bad(p: Profile, key: str, message: str, fix: str, status: str = FAIL) -> Finding:
    return Finding("rules", key, status, message, fix, p.where(key))
