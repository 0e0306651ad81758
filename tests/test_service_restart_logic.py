"""The decisions of the smoke-tested restart (roll back or not, to what, with which exit code), driven by a
RECORDING runner that stands in for systemctl and a scripted verifier: pure logic only. The same flow against a real
systemd and the simulator is tests/systemd/test_service_systemd.py.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from kimi_serve.check.launch import validated_launch
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
        self.options: list[tuple[str, ...]] = []

    def __call__(
        self, endpoint: str, secret: Path | None, suite: str, timeout: float, options: tuple[str, ...] = ()
    ) -> tuple[int, str]:
        self.endpoints.append(endpoint)
        self.options.append(options)
        code = self.codes.pop(0)
        return code, "contract holds" if code == 0 else "tool_calls missing"


def _plan(root: Path, write_profile, name: str, port: int, extra: str = "") -> Plan:
    # service.user root: no account changes here (tests/test_service_user.py covers them), so the recorded
    # commands are systemctl's alone
    profile = load_profile(
        str(write_profile(f"extends: sim\nserver:\n  port: {port}\nservice:\n  user: root\n{extra}", name=name))
    )
    unit = render_unit(profile, validated_launch(profile), CTX)
    return Plan(profile, unit, ServicePaths(root, unit.name), False, True)


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
def test_failed_restart_rolls_back_to_last_good(
    good_installed: Plan, tmp_path: Path, write_profile, new_restart_rc: int, new_verify: list[int]
) -> None:
    bad = _plan(tmp_path, write_profile, "bad", 30002)
    runner = RecordingRunner([new_restart_rc, 0])
    verifier = ScriptedVerifier([*new_verify, 0])
    result = restart(bad, Systemd(runner, Path("/")), verifier, {})
    assert result.exit_code == 1
    assert result.new is not None and not result.new.ok and result.new.profile == "bad"
    assert result.rollback is not None and result.rollback.ok and result.rollback.profile == "good"
    assert bad.paths.unit_file.read_text() == good_installed.unit.text
    expected = ["daemon-reload", "enable", "restart", "daemon-reload", "reset-failed", "restart"]
    if new_restart_rc:  # a failed start: restart asks systemd how the ExecStartPost verify ended (exit 70 = a bug)
        expected.insert(3, "show")
    assert runner.verbs() == expected
    assert verifier.endpoints[-1] == "127.0.0.1:30001"  # the rollback is verified where the good unit serves
    assert read_record(bad.paths.last_good_record)["profile"] == "good"  # type: ignore[index]
    assert read_record(bad.paths.last_verify_record)["status"] == "pass"  # type: ignore[index]


def test_restart_and_the_units_own_verify_judge_the_draft_by_the_profiles_floor(tmp_path: Path, write_profile) -> None:
    """A profile's speculative.accept_floor reaches every verify of its unit: the ExecStartPost line, restart's own
    check, and the rollback's check of the last good unit (from its record); a profile on verify's default floor
    passes nothing, so its unit and record stay as they were."""
    floored = _plan(tmp_path, write_profile, "floored", 30001, "speculative:\n  accept_floor: 3.1\n")
    post = [line for line in floored.unit.text.splitlines() if line.startswith("ExecStartPost=")]
    assert post and post[-1].endswith('"--suite" "quick" "--accept-floor" "3.1"')
    verifier = ScriptedVerifier([0])
    assert restart(floored, Systemd(RecordingRunner([0]), Path("/")), verifier, {}).exit_code == 0
    assert verifier.options == [("--accept-floor", "3.1")]
    plain = _plan(tmp_path, write_profile, "plain", 30002)
    assert "--accept-floor" not in plain.unit.text
    verifier = ScriptedVerifier([1, 0])  # the plain unit fails: the floored one is rolled back to and checked again
    result = restart(plain, Systemd(RecordingRunner([0, 0]), Path("/")), verifier, {})
    assert result.exit_code == 1 and result.rollback is not None and result.rollback.profile == "floored"
    assert verifier.options == [(), ("--accept-floor", "3.1")]
    assert "verify_args" not in (read_record(plain.paths.last_verify_record) or {})


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


# ------------------------------------------------------------------ a kimi-serve bug is not a contract violation


class ShowingRunner(RecordingRunner):
    """As RecordingRunner, and `systemctl show -p ExecStartPost` answers how the unit's verify last ended, in
    systemd's ExecCommand form."""

    def __init__(self, restart_rcs: Sequence[int], post_status: int) -> None:
        super().__init__(restart_rcs)
        self.post_status = post_status

    def __call__(self, argv: Sequence[str], *, timeout: float) -> Completed:
        done = super().__call__(argv, timeout=timeout)
        if argv[:2] == ["systemctl", "show"]:
            return Completed(
                tuple(argv),
                0,
                "ExecStartPost={ path=/opt/kimi-serve/venv/bin/kimi-serve ; argv[]=... ;"
                f" ignore_errors=no ; pid=4242 ; code=exited ; status={self.post_status}/n/a }}\n",
                "",
            )
        return done


def test_verify_crashing_in_restart_is_reported_as_a_bug_and_not_rolled_back(
    good_installed: Plan, tmp_path: Path, write_profile, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kimi_serve.service.verifier import contract_verifier

    new = _plan(tmp_path, write_profile, "new", 30002)
    runner = RecordingRunner([0])
    monkeypatch.setenv("KIMI_SERVE_TEST_HOOK", "raise-at=verify.run")  # a bug inside the real `kimi-serve verify`
    result = restart(new, Systemd(runner, Path("/")), contract_verifier, {})
    assert result.exit_code == 70
    assert result.new is not None and result.new.started and result.new.verify_exit == 70
    assert "a bug in kimi-serve, not a verdict on the server" in result.new.detail
    assert "InjectedFault" in result.new.detail
    assert result.rollback is None and runner.verbs() == ["daemon-reload", "enable", "restart"]  # no rollback
    rollback = next(s for s in result.steps if s.action.startswith("roll back"))
    assert rollback.status == "skipped" and "running but unverified" in rollback.detail
    assert new.paths.unit_file.read_text() == new.unit.text  # the new unit stays ...
    assert read_record(new.paths.last_good_record)["profile"] == "good"  # type: ignore[index]  # ... not as good


def test_execstartpost_verify_crashing_is_reported_as_a_bug(
    good_installed: Plan, tmp_path: Path, write_profile
) -> None:
    new = _plan(tmp_path, write_profile, "new", 30002)
    runner = ShowingRunner([1], post_status=70)
    result = restart(new, Systemd(runner, Path("/")), ScriptedVerifier([]), {})
    assert result.exit_code == 70 and result.rollback is None
    assert result.new is not None and "ExecStartPost kimi-serve verify crashed (exit 70" in result.new.detail
    assert "systemd stopped it" in next(s.detail for s in result.steps if s.action.startswith("roll back"))


def test_execstartpost_contract_failure_still_rolls_back(good_installed: Plan, tmp_path: Path, write_profile) -> None:
    new = _plan(tmp_path, write_profile, "new", 30002)
    result = restart(new, Systemd(ShowingRunner([1, 0], post_status=1), Path("/")), ScriptedVerifier([0]), {})
    assert result.exit_code == 1 and result.rollback is not None and result.rollback.ok


def test_verify_with_a_bug_exits_70_in_one_line(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIMI_SERVE_TEST_HOOK", "raise-at=verify.run")
    r = cli("verify", "--host", "127.0.0.1:9")
    assert r.code == 70
    assert r.err.count("\n") == 1 and "internal error: InjectedFault" in r.err and "a bug in kimi-serve" in r.err


# ------------------------------------------------------------------ deadlines: a 30-minute cold start is not cut short


def test_restart_waits_for_a_full_30_minute_cold_start(tmp_path: Path) -> None:
    from kimi_serve.service.timeouts import restart_wait_sec, start_timeout_sec
    from kimi_serve.up.options import UpOptions

    profile = load_profile("prod")
    assert profile.startup.timeout == 1800
    unit = render_unit(profile, validated_launch(profile), CTX)
    plan = Plan(profile, unit, ServicePaths(tmp_path, unit.name), False, True)
    runner = TimingRunner()
    restart(
        plan,
        Systemd(runner, Path("/")),
        ScriptedVerifier([0]),
        {"KIMI_SERVE_ACCOUNTS_ROOT": os.environ["KIMI_SERVE_ACCOUNTS_ROOT"]},
    )
    waited = runner.timeouts["restart"]
    timeout_start = int(
        next(line for line in unit.text.splitlines() if line.startswith("TimeoutStartSec=")).split("=")[1]
    )
    assert timeout_start == start_timeout_sec(profile) >= 1800 + profile.verify.timeout  # systemd's start deadline
    assert f'"--wait" "{profile.startup.timeout}"' in unit.text  # ExecStartPost waits out the whole cold start
    # restart lets `systemctl restart` run for the old server's stop plus systemd's whole start deadline
    assert waited == restart_wait_sec(profile) >= profile.service.stop_timeout + timeout_start
    assert UpOptions.from_profile(profile).startup_timeout_s == 1800.0  # `up`'s own deadline is the profile's


class TimingRunner(RecordingRunner):
    def __init__(self) -> None:
        super().__init__([0])
        self.timeouts: dict[str, float] = {}

    def __call__(self, argv: Sequence[str], *, timeout: float) -> Completed:
        self.timeouts[argv[1]] = timeout
        return super().__call__(argv, timeout=timeout)
