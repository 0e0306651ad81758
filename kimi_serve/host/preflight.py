"""The preflight of a start (`up`, `bench`): doctor's checks as the invoking user; a failing one stops the start
before anything runs (exit 5)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kimi_serve.core.errors import ExitCode
from kimi_serve.core.findings import FAIL, WARN, error_from, failed
from kimi_serve.host.allreduce_selftest import CODE as SELFTEST
from kimi_serve.host.doctor import Host, run_doctor
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile


def preflight(profile: Profile, launch: Launch, say: Callable[[str], None], host: Any = None) -> None:
    """Run doctor for ``launch`` (``host``: a :class:`~kimi_serve.host.doctor.Host`, which tests replace), say each
    warning and failure and the collective self-test's line, raise exit 5 on the first failure (a path that
    disagrees or hangs in the self-test among them)."""
    report = run_doctor(
        profile, launch, host or Host(coldstart_probe="if-unknown"), service=False
    )  # a start runs as you, not as service.user
    for c in report.checks:
        if c.status in (WARN, FAIL) or c.code == SELFTEST:  # the self-test's line always (a skip says why)
            say(f"preflight {c.status}: {c.code}: {c.line()}")
    bad = failed(report.checks)
    if bad:
        raise error_from(bad, more="see above", prefix=f"preflight: {bad[0].code}: ", exit_code=ExitCode.ENVIRONMENT)
    warns = sum(c.status == WARN for c in report.checks)
    say(
        f"preflight: {len(report.checks)} checks passed"
        + (f" ({warns} warning{'' if warns == 1 else 's'})" if warns else "")
    )
