"""What you see is what runs: `render` and `up --dry-run` print one line that starts the server when pasted into a
shell (run here through `bash -c`, the simulator profile with the CPU SGLang venv); `simulate --port` is range-checked.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from kimi_serve.profile.launch import Launch
from tests.up_helpers import free_port


def _launch(env: dict[str, str]) -> Launch:
    argv = ("/venv/bin/python", "-m", "m", "--served-model-name", "a b'c")
    return Launch(argv=argv, env=env, server_args=argv[3:], engine="sglang", host="h", port=1, api_key_file=None)


def test_shell_is_one_line_without_backslash_joins():
    line = _launch({"B": "x y", "A": "1"}).shell()
    assert "\n" not in line and "\\" not in line
    assert shlex.split(line) == ["env", "A=1", "B=x y", "/venv/bin/python", "-m", "m", "--served-model-name", "a b'c"]
    assert _launch({}).shell() == "/venv/bin/python -m m --served-model-name 'a b'\"'\"'c'"


def _health(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=3) as r:
            return int(r.status)
    except OSError as exc:
        return int(getattr(exc, "code", 0) or 0)


@pytest.mark.parametrize("how", ["render", "up --dry-run"])
def test_printed_command_starts_the_simulator_when_pasted(cli, sglang_python: str, tmp_path: Path, how: str) -> None:
    port = free_port()
    res = cli(*how.split(), "-p", "sim", "--set", f"server.port={port}")
    assert res.code == 0, res.err
    text = res.out
    lines = [ln.split("$ ", 1)[1] for ln in text.splitlines() if "$ " in ln] if how != "render" else text.splitlines()
    assert len(lines) == 1, text
    line = lines[0]
    assert "PYTHONPATH=" in line and sglang_python in line
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the line must carry what it needs
    proc = subprocess.Popen(
        ["bash", "-c", line],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        code = 0
        while time.monotonic() < deadline and proc.poll() is None:
            code = _health(port)
            if code in (200, 503):  # bound and answering: past every import, SGLang's serving layer is up
                break
            time.sleep(1)
        out = b""
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else b""
        assert code in (200, 503), out.decode(errors="replace")[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_simulate_port_out_of_range_is_refused(cli):
    res = cli("simulate", "-p", "sim", "--port", "99999", "--dry-run")
    assert res.code == 2, (res.code, res.out, res.err)
    assert "99999" in res.err or "65535" in res.err
