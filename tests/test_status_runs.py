"""`status` shows what runs: the run record a foreground `up` leaves (kimi_serve.core.runs), listed beside the units,
a stale one (its pid gone or reused) shown once as such and pruned, never reported running; and the unit's failures
as findings with a fix (systemd not reachable: one line, not systemctl's raw text)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kimi_serve.check.launch import plan_deployment
from kimi_serve.core.proc import Completed
from kimi_serve.core.runs import read_runs, run_record, runs_dir
from kimi_serve.profile.loader import load_profile
from kimi_serve.service.state import ServicePaths
from kimi_serve.service.status import status
from kimi_serve.service.systemctl import Systemd
from kimi_serve.up.locks import run_fields


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_up_leaves_a_run_record_while_it_serves(cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import kimi_serve.up.run as run

    seen: dict[str, Any] = {}

    def serving(deployment: Any, opts: Any, log_path: Path, console: Any, clock: Any) -> int:
        seen["runs"] = [r.to_json() for r in read_runs()]
        seen["status"] = cli("status", "--json")
        return 0

    monkeypatch.setattr(run, "preflight", lambda *a, **k: None)
    monkeypatch.setattr(run, "serve_deployment", serving)
    assert run.run_up("sim", log_file=tmp_path / "up.log") == 0
    [rec] = seen["runs"]
    assert rec["state"] == "running" and rec["pid"] == os.getpid() and rec["profile"] == "sim"
    assert rec["port"] == 30000 and rec["log"] == str(tmp_path / "up.log") and rec["engine"] == "simulator"
    doc = json.loads(seen["status"].out)
    assert [r["pid"] for r in doc["runs"]] == [os.getpid()]
    assert read_runs() == []  # removed when `up` ended
    assert not any(runs_dir().glob(".*"))  # no temporary file left


def test_a_stale_record_is_shown_once_as_such_and_pruned(cli, tmp_path: Path) -> None:
    with run_record({"profile": "sim", "engine": "simulator", "endpoint": "127.0.0.1:30000", "port": 30000}) as path:
        assert path is not None
        record = json.loads(path.read_text())
    folder = runs_dir()
    gone = {**record, "pid": _dead_pid()}
    reused = {**record, "pid": os.getpid(), "pid_start": (record["pid_start"] or 0) + 1}  # our pid, another start
    (folder / "up-1.json").write_text(json.dumps(gone))
    (folder / "up-2.json").write_text(json.dumps(reused))
    (folder / "up-3.json").write_text("{torn")  # never written by up (it renames whole files), skipped
    r = cli("status", "--root", str(tmp_path), "--json")
    doc = json.loads(r.out)
    assert sorted(x["state"] for x in doc["runs"]) == ["stale", "stale"]
    assert not (folder / "up-1.json").exists() and not (folder / "up-2.json").exists()
    r = cli("status", "--root", str(tmp_path))
    assert "no foreground `kimi-serve up` runs now" in r.out and "up of profile" not in r.out


def test_a_replicated_profile_records_its_router_and_replicas(tmp_path: Path) -> None:
    profile = load_profile("sim-dp2")
    fields = run_fields(plan_deployment(profile), tmp_path / "up-sim-dp2.log")
    assert fields["router"]["endpoint"].endswith(f":{profile.router.port}") and fields["port"] == profile.router.port
    assert [x["index"] for x in fields["replicas"]] == list(range(profile.replicas))
    assert fields["replicas"][1]["log"] == str(tmp_path / "up-sim-dp2-replica1.log")
    with run_record(fields):
        [run] = read_runs()
    assert run.running and "router" in run.line() and "replica 1" in run.line()


def test_systemd_not_reachable_is_one_finding_with_a_fix(tmp_path: Path) -> None:
    def no_bus(argv: Any, *, timeout: float) -> Completed:
        return Completed(
            tuple(argv), 1, "", "System has not been booted with systemd.\nFailed to connect to bus: Host is down\n"
        )

    st = status(ServicePaths(Path("/"), "nothing-here.service"), Systemd(no_bus, Path("/")))
    codes = {f.code: f for f in st.findings()}
    assert set(codes) == {"unit.not_installed", "systemd.unreachable"} and st.exit_code == 1
    assert "\n" not in codes["systemd.unreachable"].message and codes["systemd.unreachable"].fix
    assert "Failed to connect" not in codes["systemd.unreachable"].line()
