"""Results of checks: a :class:`Finding` is one pass / warn / fail line with its reason and fix."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"


@dataclass(frozen=True)
class Finding:
    layer: str  # schema, flags, rules, sglang, patches, host, contract
    name: str  # stable id, e.g. "parsers.tool_call"
    status: str  # pass | warn | fail | skip
    message: str  # one line: what holds or what is wrong
    fix: str = ""  # one line: what to do (warn/fail)
    where: str = ""  # breadcrumb: file:line: key

    def line(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        return f"{text} (fix: {self.fix})" if self.fix and self.status in (WARN, FAIL) else text

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def failed(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.status == FAIL]
