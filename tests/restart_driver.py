"""STAND-IN driver for the crash tests of `restart`: runs what the `restart` command runs (host lock, rollback of
an interrupted change, the smoke-tested restart) against a unit under ROOT, with a recording stand-in for systemctl
(every call succeeds) and a scripted verifier instead of a real server.

Usage: ``python tests/restart_driver.py ROOT PROFILE_YAML pass|fail`` (fail: the new unit's verify fails, the rollback's
passes). Prints the exit code of the restart.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from kimi_serve.check.launch import validated_launch
from kimi_serve.core.lock import host_lock
from kimi_serve.core.proc import Completed
from kimi_serve.profile.loader import load_profile
from kimi_serve.service.install import Plan
from kimi_serve.service.journal import recover
from kimi_serve.service.restart import restart
from kimi_serve.service.state import ServicePaths
from kimi_serve.service.systemctl import Systemd
from kimi_serve.service.unit import UnitContext, render_unit

CTX = UnitContext(kimi_serve="/opt/kimi-serve/venv/bin/kimi-serve", package_root="/opt/kimi-serve/src")


def stand_in_systemctl(argv: Sequence[str], *, timeout: float) -> Completed:
    return Completed(tuple(argv), 0, "", "")


def plan_for(root: Path, profile_path: str) -> Plan:
    profile = load_profile(profile_path)
    unit = render_unit(profile, validated_launch(profile), CTX)
    return Plan(profile, unit, ServicePaths(root, unit.name), False, True)


def run(root: Path, profile_path: str, scenario: str) -> int:
    codes = [0] if scenario == "pass" else [1, 0]

    def verifier(
        endpoint: str, secret: Path | None, suite: str, timeout: float, options: tuple[str, ...] = ()
    ) -> tuple[int, str]:
        code = codes.pop(0)
        return code, "contract holds" if code == 0 else "tool_calls missing"

    systemd = Systemd(stand_in_systemctl, Path("/"))
    with host_lock("restart"):
        plan = plan_for(root, profile_path)
        recover(plan.paths, systemd)
        return int(restart(plan, systemd, verifier, dict(os.environ)).exit_code)


if __name__ == "__main__":
    code = run(Path(sys.argv[1]), sys.argv[2], sys.argv[3])
    print(code)
    sys.exit(0)
