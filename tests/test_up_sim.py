"""`kimi-serve up --profile sim`: start to a passing contract with visible phases, clean stop on Ctrl-C; plus the
preflight and --dry-run paths of the CLI (which start nothing)."""

from __future__ import annotations

import signal
import socket
import textwrap
from collections.abc import Callable
from pathlib import Path

from test_up_sglang import UpProcess
from up_helpers import free_port, live_group, server_pid


def sim_profile(directory: Path, port: int) -> Path:
    path = directory / "sim-test.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        extends: sim
        server: {{port: {port}}}
        """)
    )
    return path


def test_up_sim_reaches_a_passing_contract_and_stops_on_ctrl_c(tmp_path: Path, sglang_python: str) -> None:
    up = UpProcess(
        ["--profile", str(sim_profile(tmp_path, free_port())), "--log-file", str(tmp_path / "s.log")], tmp_path
    )
    try:
        assert up.wait_for("supervising pid", 240), up.output[-4000:]
        assert "kimi-serve up: [http] HTTP server up at" in up.output
        assert "kimi-serve up: [ready]" in up.output
        assert "verify: contract holds" in up.output
        pid = server_pid(up.output)
        up.proc.send_signal(signal.SIGINT)
        assert up.finish(60) == 130
    finally:
        if up.proc.poll() is None:
            up.proc.kill()
    assert "SIGINT received; stopping the server" in up.output and "exit status 0" in up.output
    assert live_group(pid) == []


def test_dry_run_prints_the_launch_and_starts_nothing(
    cli: Callable[..., object], tmp_path: Path, sglang_python: str
) -> None:
    result = cli("up", "--profile", str(sim_profile(tmp_path, free_port())), "--dry-run")
    assert result.code == 0, result.err
    assert "dry run: would start simulator" in result.out and "-m kimi_serve.simulator" in result.out
    assert "starting simulator" not in result.out


def test_dry_run_with_host_and_port_launches_there(
    cli: Callable[..., object], tmp_path: Path, sglang_python: str
) -> None:
    port = free_port()
    result = cli(
        "up",
        "--profile",
        str(sim_profile(tmp_path, free_port())),
        "--dry-run",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    )
    assert result.code == 0, result.err
    assert f"--host 127.0.0.1 --port {port} " in result.out


def test_port_in_use_stops_up_in_preflight(cli: Callable[..., object], tmp_path: Path, sglang_python: str) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        result = cli("up", "--profile", str(sim_profile(tmp_path, port)), "--log-file", str(tmp_path / "x.log"))
    assert result.code == 5
    assert f"preflight: port: port {port} on 127.0.0.1 is already in use" in result.err
    assert "starting" not in result.out and not (tmp_path / "x.log").exists()


def test_bad_profile_is_a_usage_error(cli: Callable[..., object], tmp_path: Path) -> None:
    result = cli("up", "--profile", str(tmp_path / "missing.yaml"))
    assert result.code == 2 and "does not exist" in result.err
