"""STAND-IN driver for the crash tests of the rolling restart: runs what `restart` of a replicated deployment runs
(the host lock, the rollback of every member's interrupted change, the rolling restart) against a deployment under
ROOT, with a stand-in systemctl (every call succeeds), a scripted verifier (every check passes) and the test's
STAND-IN router (tests/router_stand_in.py) on ROUTER_PORT, which outlives a killed run as a real router would.

Usage: ``python tests/rolling_driver.py ROOT PROFILE_YAML install|restart``. Prints the exit code.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from restart_driver import CTX, stand_in_systemctl

from kimi_serve.core.lock import root_lock
from kimi_serve.profile.deployment import deployment_of
from kimi_serve.profile.launch import build_launch
from kimi_serve.profile.loader import load_profile
from kimi_serve.service import rolling
from kimi_serve.service.fleet import Fleet, install_fleet, recover_fleet
from kimi_serve.service.install import Plan
from kimi_serve.service.member_units import render_members
from kimi_serve.service.state import ServicePaths
from kimi_serve.service.systemctl import Systemd

BASE = "fleet.service"


def verifier(
    endpoint: str, secret: Path | None, suite: str, timeout: float, options: tuple[str, ...] = ()
) -> tuple[int, str]:
    return 0, "contract holds"


def fleet_for(root: Path, profile_path: str) -> Fleet:
    profile = load_profile(profile_path)
    deployment = deployment_of(profile, build_launch(profile, sys.executable), pythonpath=CTX.package_root)
    members = render_members(deployment, CTX, BASE)
    plans = {m: Plan(profile, u, ServicePaths(root, u.name), False, True) for m, u in members.items()}
    return Fleet(deployment, BASE, plans, (), True)


def run(root: Path, profile_path: str, op: str) -> int:
    rolling.DRAIN_S = 0.0  # the stand-in router has no requests in flight to drain
    with root_lock(op, root):
        recover_fleet(Systemd(stand_in_systemctl, root), BASE)  # files and records under ROOT (systemd not asked)
        fleet = fleet_for(root, profile_path)
        systemd = Systemd(stand_in_systemctl, Path("/"))
        if op == "install":
            return int(install_fleet(fleet, systemd, verifier, dict(os.environ)).exit_code)
        result, _ = rolling.rolling_restart(fleet, systemd, verifier, dict(os.environ))
        return int(result.exit_code)


if __name__ == "__main__":
    code = run(Path(sys.argv[1]), sys.argv[2], sys.argv[3])
    print(code)
    sys.exit(0)
