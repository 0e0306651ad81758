"""`kimi-serve up` against SGLang 0.5.23's REAL launch_server on CPU (tiny dummy Llama, tests/sglang_cpu/): real logs,
readiness, signal behaviour and exit codes. Three real starts in all (each 10-60 s on a 2-core box)."""

from __future__ import annotations

import json
import re
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from sim_pool import SGLangSession
from up_helpers import UpProcess, cpu_profile, free_port, live_group, server_pid

READY_LINE = "supervising pid"


@pytest.fixture(scope="module")
def running(
    sglang_session: SGLangSession, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[UpProcess, Path, int]]:
    python = sglang_session.python
    tmp = tmp_path_factory.mktemp("up-sglang")
    port = free_port()
    profile = cpu_profile(tmp, port, python)
    up = UpProcess(["--profile", str(profile), "--no-verify", "--log-file", str(tmp / "server.log")], tmp)
    ready = up.wait_for(READY_LINE, 300)
    try:
        assert ready, f"up did not reach supervision:\n{up.output[-4000:]}"
        yield up, tmp, port
    finally:
        if up.proc.poll() is None:
            up.proc.send_signal(signal.SIGTERM)
            up.finish(60)


def test_real_start_shows_phases_and_readiness(running: tuple[UpProcess, Path, int]) -> None:
    up, _tmp, port = running
    for phase in ("[init]", "[weights]", "[kv_cache]", "[http]", "[ready]"):
        assert f"kimi-serve up: {phase}" in up.output, phase
    seconds = float(re.search(r"server ready in ([\d.]+)s", up.output).group(1))
    print(f"\nreal SGLang (CPU, tiny Llama): start-to-ready {seconds:.1f}s")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=20) as reply:
        assert reply.status == 200
    assert "[Errno 98]" not in up.output


def test_a_second_up_on_this_host_exits_75_naming_the_first(
    running: tuple[UpProcess, Path, int], sglang_python: str
) -> None:
    up, tmp, port = running  # `up` holds its GPUs (and port, and its venv shared) until its server is stopped
    again = cpu_profile(tmp, port + 1 if port < 65535 else port - 1, sglang_python, name="again2")
    second = UpProcess(["--profile", str(again), "--no-verify", "--log-file", str(tmp / "again2.log")], tmp)
    assert second.finish(60) == 75
    assert f"`kimi-serve up` (pid {up.proc.pid}, since " in second.output and "holds gpu " in second.output
    assert "starting sglang" not in second.output and "preflight" not in second.output


def test_port_in_use_is_refused_before_launch(running: tuple[UpProcess, Path, int], sglang_python: str) -> None:
    _up, tmp, port = running  # the real SGLang server holds the port
    again = cpu_profile(tmp, port, sglang_python, name="again")
    other_state = tmp / "other-state"  # another state root: the port lock does not answer, the port check must
    second = UpProcess(["--profile", str(again), "--no-verify", "--log-file", str(tmp / "again.log")], other_state)
    assert second.finish(60) == 5
    assert f"port {port} on 127.0.0.1 is already in use" in second.output
    assert "starting sglang" not in second.output  # refused up front, not ~2 min after a full load


def test_sigterm_stops_the_real_server_cleanly(running: tuple[UpProcess, Path, int]) -> None:
    up, tmp, _port = running
    pid = server_pid(up.output)
    up.proc.send_signal(signal.SIGTERM)
    assert up.finish(90) == 130
    assert "SIGTERM received; stopping the server" in up.output
    assert f"server pid {pid} ended: exit status 0" in up.output  # SGLang drained and exited 0
    assert live_group(pid) == []
    assert "Finished server process" in (tmp / "server.log").read_text(errors="replace")


def test_contract_failure_stops_the_real_server(tmp_path: Path, sglang_python: str) -> None:
    # a tiny random Llama without tokenizer cannot answer the chat contract: up must stop it and exit 1
    python = sglang_python
    up = UpProcess(
        ["--profile", str(cpu_profile(tmp_path, free_port(), python)), "--log-file", str(tmp_path / "s.log")], tmp_path
    )
    code = up.finish(400)
    assert code == 1, up.output[-3000:]
    assert "contract check failed" in up.output and "stopping the server" in up.output
    assert live_group(server_pid(up.output)) == []


def test_real_model_error_is_reported_from_the_traceback(tmp_path: Path, sglang_python: str) -> None:
    # SGLang's main process raises "Unrecognized model" for a config without model_type and exits 1 within seconds
    python = sglang_python
    model = tmp_path / "broken-model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"hidden_size": 64}))
    up = UpProcess(
        [
            "--profile",
            str(cpu_profile(tmp_path, free_port(), python, model=model)),
            "--no-verify",
            "--log-file",
            str(tmp_path / "s.log"),
        ],
        tmp_path,
    )
    assert up.finish(300) == 4, up.output[-3000:]
    assert "FAILURE in the server log (traceback" in up.output
    assert "ValueError: Unrecognized model in" in up.output
    assert "exit status 1" in up.output
    assert live_group(server_pid(up.output)) == []
