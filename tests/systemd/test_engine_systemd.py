"""The supported layout under a REAL systemd (PID 1 in a systemd-nspawn container, docs/systemd.md "Supported
layout"): on a host whose own Python lives under a 0700 /root (this machine's pyenv, as CI's), `engine install` puts
a standalone interpreter, SGLang from the CPU lock and kimi-serve itself under a prefix outside /root, and the
simulator unit installed from a profile whose `python:` is that engine starts, passes its start gate and serves: its
interpreter, its gate and the package the simulator imports all come from the prefix. The other systemd tests open
/root to 0711 inside the container; this one leaves it closed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import requests
from conftest import ENGINE_ROOT

from kimi_serve.service.unit import UnitContext

UNIT = "kimi-engine-test.service"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pid_serving(argv0: str, port: int) -> int | None:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            args = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]]
        except OSError:
            continue
        if args[:1] == [argv0] and "kimi_serve.simulator" in args and str(port) in args:
            return int(pid)
    return None


def test_the_simulator_unit_runs_from_the_engine_prefix_with_root_closed(sandbox: Any, tmp_path: Path) -> None:
    assert sandbox.run(["stat", "-c", "%a", "/root"]).stdout.strip() == "700"  # the container's /root: closed
    prefix = ENGINE_ROOT / "venv"
    done = subprocess.run(
        [sys.executable, "-m", "kimi_serve", "engine", "install", "--lock", "cpu", "--prefix", str(prefix), "--quiet"]
        + ["--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "KIMI_SERVE_STATE_DIR": str(tmp_path / "state")},
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(done.stdout)["record"]
    assert record["interpreter"]["kind"] == "copy"
    base = Path(record["interpreter"]["base"])
    assert str(base).startswith("/root/"), base  # the premise: the Python engine install ran from is under /root

    port = _free_port()
    profile = tmp_path / "engine.yaml"
    profile.write_text(
        f"extends: sim\npython: {prefix / 'bin' / 'python'}\nserver:\n  port: {port}\nstartup:\n  timeout: 240\n"
        f"service:\n  unit_name: {UNIT.removesuffix('.service')}\nmonitor:\n  enabled: false\n"
    )
    kimi = UnitContext.detect().kimi_serve  # the operator's kimi-serve: this checkout's venv, its Python under /root
    env = {"KIMI_SERVE_ACCOUNTS_ROOT": f"/proc/{sandbox.leader}/root"}  # the service user in the container's passwd

    def cli(*args: str) -> tuple[int, str]:
        run = sandbox.run([kimi, *args], env=env)
        return run.returncode, run.stdout + run.stderr

    rc, out = cli("install-service", "--profile", str(profile), "--now")
    assert rc == 0, out
    assert sandbox.run(["systemctl", "is-active", UNIT]).stdout.strip() == "active"
    unit = sandbox.run(["cat", f"/etc/systemd/system/{UNIT}"]).stdout
    gate = next(line for line in unit.splitlines() if line.startswith("ExecStartPost="))
    assert gate.startswith(f'ExecStartPost="{prefix}/bin/kimi-serve" "verify"'), (
        gate
    )  # the engine's, not the operator's
    assert kimi not in unit and f"PYTHONPATH={next(prefix.glob('lib/python*/site-packages'))}" in unit, unit
    pid = _pid_serving(str(prefix / "bin" / "python"), port)
    assert pid is not None
    exe = Path(f"/proc/{pid}/exe").resolve()
    assert exe.is_relative_to(prefix / "python"), exe  # the standalone copy is what runs
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert str(base.parent.parent) not in maps  # nothing of the /root installation is loaded
    reply = requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=10)
    assert reply.json()["data"][0]["id"] == "kimi-k2.5"
    rc, out = cli("status", "--unit-name", UNIT, "--json")
    st = json.loads(out)
    assert rc == 0 and st["last_verify"]["status"] == "pass", out

    rc, out = cli("uninstall-service", "--unit-name", UNIT)
    assert rc == 0, out
