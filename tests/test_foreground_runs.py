"""Foreground runs are first-class (docs/up.md, "Run records"): a real `kimi-serve up --profile sim-dp2 --set ...` on
free ports in a subprocess; `verify --profile sim-dp2` (no --set) checks that run's real endpoints, from its run
record; `status --profile sim-dp2` reports it truthfully: serving through the router, exit 0, then, with a replica
SIGKILLed, "serving through the router, degraded" (never "NOT serving") and exit 1; and only this profile's `up`s
and starts, never another profile's. Plus `verify` and `doctor` take --set like every profile command."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from up_helpers import UpProcess, free_port

from kimi_serve.core.errors import ExitCode
from kimi_serve.host.starts import append_start

pytestmark = pytest.mark.usefixtures("loopback_port")  # free ports, a held one, servers on loopback
START_S = 300  # a loaded 2-core machine
OTHER_START = {"time": "2026-01-01T00:00:00+00:00", "profile": "prod", "outcome": "ready", "total_s": 1.0}


def _ports() -> tuple[int, int, int]:
    """A free pair (replica i at base + i), the router's port and its metrics port, all distinct."""
    while True:
        base = free_port()
        with socket.socket() as a, socket.socket() as b:
            try:
                a.bind(("127.0.0.1", base + 1))
            except OSError:
                continue
            b.bind(("127.0.0.1", 0))
            router = int(b.getsockname()[1])
        metrics = free_port()
        if len({base, base + 1, router, metrics}) == 4:
            return base, router, metrics


def _status(cli: Callable[..., Any], *args: str) -> tuple[int, dict[str, Any]]:
    res = cli("status", *args, "--json")
    return res.code, json.loads(res.out)


def test_a_foreground_dp2_is_found_by_verify_and_status_tells_the_truth(
    tmp_path: Path, sglang_python: str, cli: Callable[..., Any]
) -> None:
    state = Path(os.environ["KIMI_SERVE_STATE_DIR"])
    append_start(state, OTHER_START)  # another profile's start: never shown under sim-dp2
    base, router, metrics = _ports()
    sets = ["--set", f"server.port={base}", "--set", f"router.port={router}", "--set", f"router.metrics_port={metrics}"]
    up = UpProcess(["--profile", "sim-dp2", *sets, "--log-file", str(tmp_path / "up.log"), "--no-verify"], state)
    try:
        assert up.wait_for("supervising 2 replicas", START_S), up.output[-4000:]
        code, doc = _status(cli, "--profile", "sim-dp2")
        assert code == ExitCode.OK, doc
        data = doc.get("data", doc)
        assert data["foreground"] and data["serving"] and not data["degraded"], data
        assert all(s.get("profile") == "sim-dp2" for s in data["starts"]), data["starts"]
        assert [r["profile"] for r in data["runs"]] == ["sim-dp2"]
        text = cli("status", "--profile", "sim-dp2")
        assert text.code == ExitCode.OK and "serving through the router" in text.out, text.out
        assert f"127.0.0.1:{router}" in text.out and "not checked" not in text.out
        assert OTHER_START["time"] not in text.out and OTHER_START["time"] not in json.dumps(data["starts"])
        # another profile's status lists none of sim-dp2's `up`
        other = cli("status", "--profile", "sim")
        assert "sim-dp2" not in other.out and "no foreground `kimi-serve up` runs now" in other.out, other.out

        # verify --profile without --set: the running up's real ports, not the profile's 30000/30010
        res = cli("verify", "--profile", "sim-dp2", "--suite", "quick", "--timeout", "300")
        assert res.code == ExitCode.OK, (res.out[-3000:], res.err[-2000:])
        assert f"127.0.0.1:{router}" in res.out and f"127.0.0.1:{base + 1}" in res.out
        assert "the running `up`" in res.err

        # a replica killed: the router still serves through the other one
        pid = int(re.search(r"replica1: server pid (\d+)", up.output).group(1))  # type: ignore[union-attr]
        os.kill(pid, signal.SIGKILL)
        end = time.monotonic() + 60
        while time.monotonic() < end:
            code, doc = _status(cli, "--profile", "sim-dp2")
            if doc.get("data", doc)["degraded"]:
                break
            time.sleep(1)
        data = doc.get("data", doc)
        assert code == ExitCode.FAILED and data["serving"] and data["degraded"], data
        text = cli("status", "--profile", "sim-dp2")
        assert "serving through the router, degraded" in text.out and "NOT serving" not in text.out, text.out
    finally:
        if up.proc.poll() is None:
            up.proc.send_signal(signal.SIGINT)
            try:
                up.finish(60)
            except subprocess.TimeoutExpired:
                up.proc.kill()
                up.proc.wait()


def test_status_of_a_foreground_up_that_does_not_answer_is_not_serving(cli: Callable[..., Any]) -> None:
    """A run record of this very process (so running) whose endpoint nobody serves: NOT serving, exit 1; a record
    with odd fields (a router that is no mapping, replicas that are not a list) reads the same, never a traceback."""
    from kimi_serve.core.runs import run_record

    port = free_port()
    for extra in ({}, {"router": "odd", "replicas": 3}, {"router": {"endpoint": f"127.0.0.1:{port}"}, "replicas": 3}):
        with run_record({"profile": "sim", "engine": "simulator", "endpoint": f"127.0.0.1:{port}", **extra}):
            res = cli("status", "--profile", "sim")
        assert res.code == ExitCode.FAILED and "NOT serving" in res.out and "Traceback" not in res.err, (extra, res.out)


def test_status_of_a_profile_with_no_up_and_no_unit_is_not_ok(cli: Callable[..., Any]) -> None:
    code, doc = _status(cli, "--profile", "sim-dp2")
    assert code == ExitCode.FAILED and not doc.get("data", doc).get("foreground"), doc


def test_verify_takes_set_like_every_profile_command(cli: Callable[..., Any]) -> None:
    port = free_port()  # nothing listens there: verify reports that port, not the profile's 30000
    res = cli("verify", "--profile", "sim", "--set", f"server.port={port}", "--json")
    assert res.code == ExitCode.UNREACHABLE and f"127.0.0.1:{port}" in res.out, (res.out[-2000:], res.err)
    bad = cli("verify", "--host", "127.0.0.1:1", "--set", "server.port=2")
    assert bad.code == ExitCode.USAGE and "--set" in bad.err and len(bad.err.strip().splitlines()) == 1, bad.err
    typo = cli("verify", "--profile", "sim", "--set", "server.prot=1")
    assert typo.code == ExitCode.USAGE and "server.prot" in typo.err, typo.err


def test_doctor_takes_set_like_every_profile_command(cli: Callable[..., Any]) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        res = cli("doctor", "--profile", "sim", "--set", f"server.port={port}", "--json")
    checks = {c["code"]: c for c in json.loads(res.out)["findings"]}
    assert f"port {port} on 127.0.0.1 is already in use" in checks["port"]["message"], checks.get("port")
