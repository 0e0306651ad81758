"""`kimi-serve up --profile sim`: start to a passing contract with visible phases, clean stop on Ctrl-C; plus the
preflight and --dry-run paths of the CLI (which start nothing); a port another process answers on is not `up`'s."""

from __future__ import annotations

import http.server
import os
import signal
import socket
import textwrap
import threading
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


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        pass


def test_a_port_taken_after_preflight_is_never_ready_nor_verified(tmp_path: Path, sglang_python: str) -> None:
    """Another process answers /health 200 on the port after the preflight, while the simulator still loads: `up`
    neither says ready nor runs the contract against it; it names that process, stops its own server, exits 3."""
    port = free_port()
    up = UpProcess(["--profile", str(sim_profile(tmp_path, port)), "--log-file", str(tmp_path / "s.log")], tmp_path)
    other = None
    try:
        assert up.wait_for("server pid", 60), up.output[-4000:]
        other = http.server.HTTPServer(("127.0.0.1", port), _Health)  # the simulator binds only once loaded
        threading.Thread(target=other.serve_forever, daemon=True).start()
        assert up.finish(120) == 3, up.output[-4000:]
    finally:
        if up.proc.poll() is None:
            up.proc.kill()
        if other is not None:
            other.shutdown()
            other.server_close()
    comm = Path(f"/proc/{os.getpid()}/comm").read_text().strip()
    assert f"port {port} is served by another process (pid {os.getpid()}, {comm}), not the server up started" in (
        up.output
    )
    assert "pick another port with --port or stop it" in up.output
    assert "[ready]" not in up.output and "contract check" not in up.output
    assert live_group(server_pid(up.output)) == []


def test_bad_profile_is_a_usage_error(cli: Callable[..., object], tmp_path: Path) -> None:
    result = cli("up", "--profile", str(tmp_path / "missing.yaml"))
    assert result.code == 2 and "does not exist" in result.err
