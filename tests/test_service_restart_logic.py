"""The decisions of the smoke-tested restart (roll back or not, to what, with which exit code), driven by a
RECORDING runner that stands in for systemctl and a scripted verifier: pure logic only. The same flow against a real
systemd and the simulator is tests/systemd/test_service_systemd.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from kimi_serve.check.report import validated_launch
from kimi_serve.core.proc import Completed
from kimi_serve.profile.loader import load_profile
from kimi_serve.service.install import Plan
from kimi_serve.service.restart import restart
from kimi_serve.service.state import ServicePaths, read_record
from kimi_serve.service.systemctl import Systemd
from kimi_serve.service.unit import UnitContext, render_unit

CTX = UnitContext(kimi_serve="/opt/kimi-serve/venv/bin/kimi-serve", package_root="/opt/kimi-serve/src")


class RecordingRunner:
    """Stand-in for the subprocess runner: records every argv; `systemctl restart` answers from a script."""

    def __init__(self, restart_rcs: Sequence[int]) -> None:
        self.calls: list[list[str]] = []
        self.restart_rcs = list(restart_rcs)

    def __call__(self, argv: Sequence[str], *, timeout: float) -> Completed:
        self.calls.append(list(argv))
        if argv[:2] == ["systemctl", "restart"]:
            rc = self.restart_rcs.pop(0)
            return Completed(tuple(argv), rc, "", "" if rc == 0 else "Job for x.service failed.")
        return Completed(tuple(argv), 0, "", "")

    def verbs(self) -> list[str]:
        return [c[1] for c in self.calls if c[0] == "systemctl"]


class ScriptedVerifier:
    def __init__(self, codes: Sequence[int]) -> None:
        self.codes = list(codes)
        self.endpoints: list[str] = []

    def __call__(self, endpoint: str, secret: Path | None, suite: str, timeout: float) -> tuple[int, str]:
        self.endpoints.append(endpoint)
        code = self.codes.pop(0)
        return code, "contract holds" if code == 0 else "tool_calls missing"


def _plan(root: Path, write_profile, name: str, port: int) -> Plan:
    # service.user root: no account changes here (tests/test_service_user.py covers them), so the recorded
    # commands are systemctl's alone
    profile = load_profile(str(write_profile(f"extends: sim\nserver:\n  port: {port}\nservice:\n  user: root\n",
                                             name=name)))
    unit = render_unit(profile, validated_launch(profile), CTX)
    return Plan(profile, unit, ServicePaths(root, unit.name), False, (), True)


@pytest.fixture
def good_installed(tmp_path: Path, write_profile) -> Plan:
    """A first restart that passed: its unit is the last good one."""
    plan = _plan(tmp_path, write_profile, "good", 30001)
    result = restart(plan, Systemd(RecordingRunner([0]), Path("/")), ScriptedVerifier([0]), {})
    assert result.exit_code == 0
    return plan


def test_passing_restart_records_last_good(tmp_path: Path, write_profile) -> None:
    plan = _plan(tmp_path, write_profile, "good", 30001)
    runner = RecordingRunner([0])
    result = restart(plan, Systemd(runner, Path("/")), ScriptedVerifier([0]), {})
    assert result.exit_code == 0 and result.new is not None and result.new.ok and result.rollback is None
    assert runner.verbs() == ["daemon-reload", "enable", "restart"]
    assert plan.paths.last_good_unit.read_text() == plan.unit.text
    assert read_record(plan.paths.last_good_record)["profile"] == "good"  # type: ignore[index]


@pytest.mark.parametrize("new_restart_rc, new_verify", [(1, []), (0, [1])], ids=["start-fails", "verify-fails"])
def test_failed_restart_rolls_back_to_last_good(good_installed: Plan, tmp_path: Path, write_profile,
                                                new_restart_rc: int, new_verify: list[int]) -> None:
    bad = _plan(tmp_path, write_profile, "bad", 30002)
    runner = RecordingRunner([new_restart_rc, 0])
    verifier = ScriptedVerifier([*new_verify, 0])
    result = restart(bad, Systemd(runner, Path("/")), verifier, {})
    assert result.exit_code == 1
    assert result.new is not None and not result.new.ok and result.new.profile == "bad"
    assert result.rollback is not None and result.rollback.ok and result.rollback.profile == "good"
    assert bad.paths.unit_file.read_text() == good_installed.unit.text
    assert runner.verbs() == ["daemon-reload", "enable", "restart", "daemon-reload", "reset-failed", "restart"]
    assert verifier.endpoints[-1] == "127.0.0.1:30001"  # the rollback is verified where the good unit serves
    assert read_record(bad.paths.last_good_record)["profile"] == "good"  # type: ignore[index]
    assert read_record(bad.paths.last_verify_record)["status"] == "pass"  # type: ignore[index]


def test_rollback_that_fails_too_exits_4(good_installed: Plan, tmp_path: Path, write_profile) -> None:
    bad = _plan(tmp_path, write_profile, "bad", 30002)
    result = restart(bad, Systemd(RecordingRunner([1, 1]), Path("/")), ScriptedVerifier([]), {})
    assert result.exit_code == 4
    assert result.rollback is not None and not result.rollback.ok
    assert read_record(bad.paths.last_verify_record)["status"] == "fail"  # type: ignore[index]


def test_first_install_failing_has_nothing_to_roll_back(tmp_path: Path, write_profile) -> None:
    plan = _plan(tmp_path, write_profile, "bad", 30002)
    runner = RecordingRunner([1])
    result = restart(plan, Systemd(runner, Path("/")), ScriptedVerifier([]), {})
    assert result.exit_code == 4 and result.rollback is None
    assert runner.verbs()[-1] == "stop"
    assert any("nothing to roll back to" in s.detail for s in result.steps)
    assert not plan.paths.last_good_unit.exists()
