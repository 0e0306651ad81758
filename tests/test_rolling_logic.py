"""The decisions of the rolling restart (which replica, in which order, when to refuse, when to stop, what is rolled
back, what the router is told), driven by a RECORDING runner standing in for systemctl, a scripted verifier and a
STAND-IN router (tests/router_stand_in.py) that records how many healthy workers it had after every change. The same flow with the real router and systemd: tests/systemd/test_fleet_systemd.py.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from restart_driver import CTX
from rolling_driver import fleet_for
from router_stand_in import StandInRouter, serving

from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.proc import Completed
from kimi_serve.core.report import to_json
from kimi_serve.profile.deployment import deployment_of
from kimi_serve.profile.launch import build_launch
from kimi_serve.profile.loader import load_profile
from kimi_serve.service import rolling
from kimi_serve.service.fleet import Fleet, install_fleet
from kimi_serve.service.install import Plan
from kimi_serve.service.member_units import render_members
from kimi_serve.service.state import ServicePaths
from kimi_serve.service.systemctl import Systemd

# its servers (or the code under test's port probes) bind loopback sockets: the listener tier
pytestmark = pytest.mark.usefixtures("loopback_port")


class Runner:
    """Stand-in for systemctl: records argv; `systemctl restart UNIT` answers from a per-unit script (default 0)."""

    def __init__(self, script: dict[str, list[int]] | None = None) -> None:
        self.calls: list[list[str]] = []
        self.script = script or {}

    def __call__(self, argv: Sequence[str], *, timeout: float) -> Completed:
        self.calls.append(list(argv))
        rc = 0
        if argv[:2] == ["systemctl", "restart"] and self.script.get(argv[2]):
            rc = self.script[argv[2]].pop(0)
        return Completed(tuple(argv), rc, "", "" if rc == 0 else "Job failed.")

    def restarted(self) -> list[str]:
        return [c[2] for c in self.calls if c[:2] == ["systemctl", "restart"]]


class Verifier:
    def __init__(self, fail: set[str] | None = None) -> None:
        self.fail, self.endpoints = fail or set(), []  # type: ignore[var-annotated]

    def __call__(
        self, endpoint: str, secret: Path | None, suite: str, timeout: float, options: tuple[str, ...] = ()
    ) -> tuple[int, str]:
        self.endpoints.append(endpoint)
        return (1, "tool_calls missing") if endpoint in self.fail else (0, "contract holds")


@pytest.fixture
def router() -> Iterator[StandInRouter]:
    with serving() as r:
        yield r


@pytest.fixture(autouse=True)
def _short_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rolling, "router_health_wait_sec", lambda p: 1.5)
    monkeypatch.setattr(rolling, "DRAIN_S", 0.0)


def _fleet(root: Path, write_profile: Any, router_port: int, name: str, extra: str = "") -> Fleet:
    text = (
        f"extends: sim-dp2\nserver:\n  port: 31010\nrouter:\n  port: {router_port}\nservice:\n  user: root\n"
        f"  unit_name: fleet\nmonitor:\n  enabled: false\n{extra}"
    )
    return fleet_for(root, str(write_profile(text, name=name)))


R0, R1 = "http://127.0.0.1:31010", "http://127.0.0.1:31011"


@pytest.fixture
def installed(tmp_path: Path, write_profile: Any, router: StandInRouter) -> Fleet:
    fleet = _fleet(tmp_path, write_profile, router.port, "v1")
    result = install_fleet(fleet, Systemd(Runner(), Path("/")), Verifier(), {})
    assert result.exit_code == 0, to_json(result)
    router.workers = {str(uuid.uuid4()): R0, str(uuid.uuid4()): R1}
    router.healthy = {R0, R1}
    return fleet


def test_good_roll_one_replica_at_a_time(
    installed: Fleet, tmp_path: Path, write_profile: Any, router: StandInRouter
) -> None:
    new = _fleet(tmp_path, write_profile, router.port, "v2", "env:\n  KIMI_TEST_ROLL: '2'\n")
    runner = Runner()
    result, rolled = rolling.rolling_restart(new, Systemd(runner, Path("/")), Verifier(), {})
    assert result.exit_code == 0, to_json(result)
    assert [r["replica"] for r in rolled] == [0, 1] and all(r["ok"] for r in rolled)
    assert runner.restarted() == ["fleet-r0.service", "fleet-r1.service"]  # the router's unit did not change
    assert router.log == [f"remove {R0}", f"add {R0}", f"remove {R1}", f"add {R1}"]
    assert router.min_healthy == 1  # never zero
    for plan in list(new.plans.values())[:-1]:  # the replicas (the router is the last member)
        assert "KIMI_TEST_ROLL=2" in plan.paths.unit_file.read_text()


def test_a_bad_replica_is_rolled_back_and_stops_the_roll(
    installed: Fleet, tmp_path: Path, write_profile: Any, router: StandInRouter
) -> None:
    new = _fleet(tmp_path, write_profile, router.port, "v2", "env:\n  KIMI_TEST_ROLL: '2'\n")
    good_r0, good_r1 = (p.paths.unit_file.read_text() for p in list(installed.plans.values())[:-1])
    runner = Runner({"fleet-r1.service": [1, 0]})  # the new unit of replica 1 fails to start; its rollback starts
    result, rolled = rolling.rolling_restart(new, Systemd(runner, Path("/")), Verifier(), {}, only=[1, 0])
    assert result.exit_code == 1
    assert [(r["replica"], r["ok"], r["rolled_back"]) for r in rolled] == [(1, False, True)]
    assert runner.restarted() == ["fleet-r1.service", "fleet-r1.service"]  # new, then the rollback; r0 untouched
    assert [p.paths.unit_file.read_text() for p in list(new.plans.values())[:-1]] == [good_r0, good_r1]
    assert router.log == [f"remove {R1}", f"add {R1}"]  # back into the rotation after its rollback
    assert any(s.action == "stop the roll" and "replicas 0 keep their units" in s.detail for s in result.steps)


def test_refused_when_no_other_worker_is_healthy(
    installed: Fleet, tmp_path: Path, write_profile: Any, router: StandInRouter
) -> None:
    router.healthy = {R1}  # replica 0 is down: restarting replica 1 would leave none
    new = _fleet(tmp_path, write_profile, router.port, "v2", "env:\n  KIMI_TEST_ROLL: '2'\n")
    runner = Runner()
    with pytest.raises(KimiServeError) as err:
        rolling.rolling_restart(new, Systemd(runner, Path("/")), Verifier(), {}, only=[1])
    assert err.value.exit_code == 5 and "no healthy worker other than replica 1" in err.value.message
    assert runner.restarted() == [] and router.log == []


def test_the_roll_stops_before_a_replica_once_no_other_worker_is_healthy(
    installed: Fleet, tmp_path: Path, write_profile: Any, router: StandInRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replica 0 rolled and seen healthy, then it drops out (its health checks fail): restarting replica 1 would leave
    clients with none, so the roll stops there, failed (exit 1), replica 1 untouched and still in the rotation."""
    seen = rolling.wait_router

    def then_r0_drops(*args: Any, **kw: Any) -> tuple[bool, str]:
        got = seen(*args, **kw)
        if kw.get("healthy") == R0:
            router.healthy.discard(R0)
        return got

    monkeypatch.setattr(rolling, "wait_router", then_r0_drops)
    new = _fleet(tmp_path, write_profile, router.port, "v2", "env:\n  KIMI_TEST_ROLL: '2'\n")
    runner = Runner()
    result, rolled = rolling.rolling_restart(new, Systemd(runner, Path("/")), Verifier(), {})
    assert result.exit_code == 1, to_json(result)
    assert [r["replica"] for r in rolled] == [0] and runner.restarted() == ["fleet-r0.service"]
    stop = [s for s in result.steps if s.action == "stop the roll before fleet-r1.service"]
    assert stop and stop[0].status == "failed" and "no healthy worker other than replica 1" in stop[0].detail
    assert router.log == [f"remove {R0}", f"add {R0}"]  # replica 1 never left the rotation


def test_a_replica_missing_from_the_rotation_is_put_back_first(
    installed: Fleet, tmp_path: Path, write_profile: Any, router: StandInRouter
) -> None:
    router.workers = {k: v for k, v in router.workers.items() if v != R1}  # a roll killed between remove and add
    new = _fleet(tmp_path, write_profile, router.port, "v2", "env:\n  KIMI_TEST_ROLL: '2'\n")
    result, _ = rolling.rolling_restart(new, Systemd(Runner(), Path("/")), Verifier(), {})
    assert result.exit_code == 0 and router.log[0] == f"add {R1}"


def test_a_topology_change_is_not_rolled(
    installed: Fleet, tmp_path: Path, write_profile: Any, router: StandInRouter
) -> None:
    moved = _fleet(tmp_path, write_profile, router.port, "v3", "replicas: 3\n")
    with pytest.raises(KimiServeError) as err:
        rolling.rolling_restart(moved, Systemd(Runner(), Path("/")), Verifier(), {})
    assert err.value.exit_code == 5 and "the replicas change" in err.value.message


def test_a_crash_mid_roll_leaves_that_replicas_journal_and_its_place_in_the_router(
    installed: Fleet, tmp_path: Path, write_profile: Any, router: StandInRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kimi-serve dies (an unexpected exception; a SIGKILL is the same for the journal) after replica 0's new unit
    is written and restarted: replica 0 goes back into the router's rotation, its journal stays, and recovering it
    puts its files back as they were before the roll; replica 1 was never touched."""
    from kimi_serve.core.faults import InjectedFault
    from kimi_serve.service.fleet import recover_fleet

    good_r0 = installed.first.paths.unit_file.read_text()
    new = _fleet(tmp_path, write_profile, router.port, "v2", "env:\n  KIMI_TEST_ROLL: '2'\n")
    monkeypatch.setenv("KIMI_SERVE_TEST_HOOK", "raise-at=service.verify")
    runner = Runner()
    with pytest.raises(InjectedFault):
        rolling.rolling_restart(new, Systemd(runner, Path("/")), Verifier(), {})
    monkeypatch.delenv("KIMI_SERVE_TEST_HOOK")
    assert runner.restarted() == ["fleet-r0.service"]
    assert router.log == [f"remove {R0}", f"add {R0}"] and router.min_healthy == 1
    journals = sorted(p.name for p in (tmp_path / "var/lib/kimi-serve/service").glob(".*.intent.json"))
    assert journals == [".fleet-r0.intent.json"]
    assert "KIMI_TEST_ROLL=2" in new.first.paths.unit_file.read_text()
    assert len(recover_fleet(Systemd(Runner(), tmp_path), "fleet.service")) == 1
    assert new.first.paths.unit_file.read_text() == good_r0


def test_a_rank_above_0_is_not_contract_checked_from_outside(tmp_path: Path, write_profile: Any) -> None:
    """Its start gate is wait-joined (ExecStartPost); its port is SGLang's dummy /health, so verify would prove
    nothing: restart records the join instead of running the verifier."""
    import sys

    from kimi_serve.service.restart import restart

    profile = load_profile(
        str(
            write_profile(
                "extends: sim\nnodes:\n  count: 2\n  rank: 1\n  leader_host: 10.0.0.1\nservice:\n  user: root\n",
                name="r1",
            )
        )
    )
    (unit,) = render_members(
        deployment_of(profile, build_launch(profile, sys.executable), pythonpath=CTX.package_root),
        CTX,
        "sglang-kimi.service",
    ).values()
    plan = Plan(profile, unit, ServicePaths(tmp_path, unit.name), False, True)
    verifier = Verifier()
    result = restart(plan, Systemd(Runner(), Path("/")), verifier, {})
    assert result.exit_code == 0 and verifier.endpoints == []
    assert result.new is not None and "joined rank 0" in result.new.detail


def test_restart_prewarms_once_before_the_roll_and_reports_every_member(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The restart command has one body for a unit and a deployment: `--prewarm` reads the checkpoint once, before
    the first replica is stopped, and the report lists the members and the rolled replicas. The plan and the roll
    are this module's stand-ins (the real roll: tests/systemd/test_fleet_systemd.py)."""
    from kimi_serve.service.install import Result

    fleet = fleet_for(tmp_path, "sim-dp2")
    calls: list[str] = []

    def roll(f: Fleet, *_a: Any, only: list[int], **_k: Any) -> tuple[Result, list[dict[str, Any]]]:
        calls.append(f"roll {only}")
        return Result(f.base), [{"replica": 1, "ok": True}]

    def prewarm(profile: Any, **_k: Any) -> dict[str, Any]:
        calls.append(f"prewarm {profile.name}")
        return {"status": "skipped"}

    monkeypatch.setattr("kimi_serve.service.run.recover", lambda *a, **k: None)
    monkeypatch.setattr("kimi_serve.service.run.plan", lambda *a, **k: fleet)
    monkeypatch.setattr("kimi_serve.prewarm.report.prewarm_first", prewarm)
    monkeypatch.setattr("kimi_serve.service.run.restart_deployment", roll)
    monkeypatch.setattr("kimi_serve.service.systemctl.Systemd.unreachable", lambda self: None)  # no systemd here
    res = cli("restart", "-p", "sim-dp2", "--prewarm", "--replica", "1", "--json")
    assert res.code == 0, res.err
    assert calls == ["prewarm sim-dp2", "roll [1]"]
    doc = json.loads(res.out)
    assert doc["prewarm"] == {"status": "skipped"} and doc["rolled"] == [{"replica": 1, "ok": True}]
    assert [m["role"] for m in doc["deployment"]] == ["replica", "replica", "router"]
    single = cli("restart", "-p", "sim", "--replica", "0")  # one unit: nothing to pick, refused before any plan
    assert single.code == 2 and "--replica" in single.err and "one replica" in single.err


# ------------------------------------------------------- a router that misbehaves: the replica always goes back


def _listed(router: StandInRouter) -> list[str]:
    return sorted(router.workers.values())


def _command_in(result_detail: str) -> str:
    return result_detail.split("put it back with: ", 1)[1]


def test_a_removal_applied_late_is_waited_for_and_the_replica_goes_back(
    installed: Fleet, tmp_path: Path, write_profile: Any, router: StandInRouter
) -> None:
    """The router accepts the removal (202) and applies it 2 s later, after the roll stopped waiting (1.5 s): before,
    exit 5 "before the first change" and the replica left the rotation for good. Now the late removal is waited for,
    the replica posted again: it is in the rotation, and the refusal says so."""
    router.late = 2.0
    new = _fleet(tmp_path, write_profile, router.port, "v2", "env:\n  KIMI_TEST_ROLL: '2'\n")
    runner = Runner()
    with pytest.raises(KimiServeError) as err:
        rolling.rolling_restart(new, Systemd(runner, Path("/")), Verifier(), {})
    assert err.value.exit_code == 5 and "it is back in it" in err.value.message, err.value.one_line()
    time.sleep(router.late)  # any removal still queued has landed by now
    assert _listed(router) == [R0, R1] and router.log == [f"remove {R0}", f"add {R0}"]
    assert runner.restarted() == []


def test_a_removal_applied_later_than_the_put_back_can_wait_names_the_replica_and_the_command(
    installed: Fleet, tmp_path: Path, write_profile: Any, router: StandInRouter
) -> None:
    """Later than both waits (4 s): the roll cannot know when the router will act, so it ends with exit 1 naming
    replica 0 and the command that puts it back; that command, run as printed, does."""
    router.late = 4.0
    new = _fleet(tmp_path, write_profile, router.port, "v2", "env:\n  KIMI_TEST_ROLL: '2'\n")
    runner = Runner()
    result, rolled = rolling.rolling_restart(new, Systemd(runner, Path("/")), Verifier(), {})
    assert result.exit_code == 1 and rolled == [] and runner.restarted() == [], to_json(result)
    named = [s for s in result.steps if s.status == "failed" and "may be out of the router's rotation" in s.detail]
    assert named and f"replica 0 ({R0})" in named[0].detail, to_json(result)
    time.sleep(4.0)
    assert _listed(router) == [R1]  # the late removal landed: exactly what the report warned of
    done = subprocess.run(["bash", "-c", _command_in(named[0].detail)], capture_output=True, timeout=30)
    assert done.returncode == 0, done
    assert _listed(router) == [R0, R1]


@pytest.mark.parametrize("deep", [-1, 2])
def test_deep_json_from_get_workers_after_the_removal_is_never_exit_70_and_the_replica_goes_back(
    installed: Fleet, tmp_path: Path, write_profile: Any, router: StandInRouter, deep: int
) -> None:
    """GET /workers answers 100,000 nested brackets after the removal: before, RecursionError, exit 70, the replica
    out. Until the replica is posted again (-1): the list is unreadable, so it is posted without it, and the roll
    stops before the first change (exit 5) with the replica back. For two answers only: the roll goes on (exit 0)."""
    router.deep_after_removal = deep
    new = _fleet(tmp_path, write_profile, router.port, "v2", "env:\n  KIMI_TEST_ROLL: '2'\n")
    runner = Runner()
    if deep < 0:
        with pytest.raises(KimiServeError) as err:
            rolling.rolling_restart(new, Systemd(runner, Path("/")), Verifier(), {})
        assert err.value.exit_code == 5, err.value.one_line()
        assert "cannot tell whether the router removed" in err.value.message, err.value.one_line()
        assert "GET /workers is not the worker list" in err.value.message, err.value.one_line()
        assert runner.restarted() == []
    else:
        result, _ = rolling.rolling_restart(new, Systemd(runner, Path("/")), Verifier(), {})
        assert result.exit_code == 0, to_json(result)
        assert runner.restarted() == ["fleet-r0.service", "fleet-r1.service"]
    assert _listed(router) == [R0, R1] and router.log[-1].startswith("add ")


def test_a_put_back_the_router_refuses_twice_is_retried(
    installed: Fleet, tmp_path: Path, write_profile: Any, router: StandInRouter
) -> None:
    """POST /workers answers HTTP 500 twice: before, one try, a "failed" line, exit 0 and the replica out. Now it is
    retried within its deadline: every replica back, exit 0."""
    router.fail = {"POST": 2}
    new = _fleet(tmp_path, write_profile, router.port, "v2", "env:\n  KIMI_TEST_ROLL: '2'\n")
    result, rolled = rolling.rolling_restart(new, Systemd(Runner(), Path("/")), Verifier(), {})
    assert result.exit_code == 0 and [r["replica"] for r in rolled] == [0, 1], to_json(result)
    assert _listed(router) == [R0, R1] and router.requests.count("POST") == 4


def test_a_put_back_that_times_out_is_retried(
    installed: Fleet, tmp_path: Path, write_profile: Any, router: StandInRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first POST /workers is held past the client's timeout: retried, the replica is back, exit 0."""
    from kimi_serve.router import client

    monkeypatch.setattr(client, "POLL_TIMEOUT_S", 1.0)
    router.hang, router.hang_s = {"POST": 1}, 2.0
    new = _fleet(tmp_path, write_profile, router.port, "v2", "env:\n  KIMI_TEST_ROLL: '2'\n")
    result, _ = rolling.rolling_restart(new, Systemd(Runner(), Path("/")), Verifier(), {}, only=[0])
    assert result.exit_code == 0, to_json(result)
    back = [s for s in result.steps if s.action == f"put {R0} back into the router's rotation"]
    assert [s.status for s in back] == ["done"], to_json(result)  # before: one try, "failed" (the report was wrong)
    time.sleep(router.hang_s)  # the held POST, answered late, may add it a second time: still in the rotation
    assert R0 in _listed(router) and R1 in _listed(router)


def test_a_put_back_the_router_always_refuses_names_the_replica_and_the_command(
    installed: Fleet, tmp_path: Path, write_profile: Any, router: StandInRouter
) -> None:
    """POST /workers always answers 500: exit 1, the roll stops after replica 0 (replica 1 keeps its place and its
    unit), the report names replica 0 and the command; once the router accepts again, that command puts it back."""
    router.fail = {"POST": 10**6}
    new = _fleet(tmp_path, write_profile, router.port, "v2", "env:\n  KIMI_TEST_ROLL: '2'\n")
    runner = Runner()
    result, rolled = rolling.rolling_restart(new, Systemd(runner, Path("/")), Verifier(), {})
    assert result.exit_code == 1 and runner.restarted() == ["fleet-r0.service"], to_json(result)
    named = [s for s in result.steps if s.status == "failed" and "may be out of the router's rotation" in s.detail]
    assert named and f"replica 0 ({R0})" in named[0].detail and "HTTP 500" in named[0].detail
    assert _listed(router) == [R1]
    router.fail = {}
    done = subprocess.run(["bash", "-c", _command_in(named[0].detail)], capture_output=True, timeout=30)
    assert done.returncode == 0 and _listed(router) == [R0, R1], done


def test_a_removal_the_router_refuses_changes_nothing(
    installed: Fleet, tmp_path: Path, write_profile: Any, router: StandInRouter
) -> None:
    """DELETE answers 500 (not applied): nothing is pending, nothing to put back: exit 5 before the first change."""
    router.fail = {"DELETE": 1}
    new = _fleet(tmp_path, write_profile, router.port, "v2", "env:\n  KIMI_TEST_ROLL: '2'\n")
    with pytest.raises(KimiServeError) as err:
        rolling.rolling_restart(new, Systemd(Runner(), Path("/")), Verifier(), {})
    assert err.value.exit_code == 5 and "HTTP 500" in err.value.message
    assert _listed(router) == [R0, R1] and router.log == []
