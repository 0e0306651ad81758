"""The one start-and-wait (kimi_serve/process/ready.py) that bench, the contract dry run and the simulator launcher
use, on real child processes and real HTTP on loopback: ready, exited first (with the log's failure and its last
lines), a failure in the log while it keeps running, never ready, cannot be started, a 200 from another process."""

from __future__ import annotations

import http.server
import os
import socket
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.process import ready
from kimi_serve.verify.target import parse_target

# its children bind loopback sockets: the listener tier
pytestmark = pytest.mark.usefixtures("loopback_port")

SERVER = """
import http.server, sys, time
port, delay, status = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
print("[2026-12-03 07:00:00 TP0] Load weight begin. avail mem=93.00 GB", flush=True)
time.sleep(delay)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(status if self.path == "/health" else 404); self.end_headers()
        print("GET", self.path, flush=True)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


@pytest.fixture
def start(tmp_path: Path, loopback_port: Callable[[], int]) -> Callable[..., tuple[ready.Server, int, Path]]:
    return lambda code, *args: _start(tmp_path, loopback_port(), code, *args)


def _start(tmp_path: Path, port: int, code: str, *args: str) -> tuple[ready.Server, int, Path]:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(code))
    log = tmp_path / "child.log"
    server = ready.start([sys.executable, str(script), str(port), *args], {"PATH": "/usr/bin:/bin"}, log)
    return server, port, log


def test_ready_returns_the_wait_and_then_queues_nothing(start: Callable[..., tuple[ready.Server, int, Path]]) -> None:
    server, port, log = start(SERVER, "0.3", "200")
    try:
        waited = ready.wait_until_ready(server, parse_target(f"127.0.0.1:{port}"), timeout=30, what="the child")
        assert 0.3 <= waited < 30
        assert not server.keep_lines  # after ready: to the log file only
        ready.wait_until_ready(server, parse_target(f"127.0.0.1:{port}"), timeout=5, what="the child")
        time.sleep(0.3)
        assert server.lines(0) == []
        assert "GET /health" in log.read_text()  # but the log file has every line
    finally:
        assert server.stop(5) in (0, -15)
        server.close()


def test_exit_before_ready_is_4_with_the_logs_failure_and_last_lines(
    start: Callable[..., tuple[ready.Server, int, Path]],
) -> None:
    code = """
    import sys
    print("Load weight begin.", flush=True)
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", flush=True)
    sys.exit(3)
    """
    server, port, log = start(code)
    with pytest.raises(KimiServeError) as err:
        ready.wait_until_ready(server, parse_target(f"127.0.0.1:{port}"), timeout=30, what="the child")
    server.close()
    e = err.value
    assert e.exit_code == ExitCode.SERVER_EXITED
    assert "exited (exit status 3) before it was ready" in e.message
    assert "CUDA out of memory" in e.message and "last log lines:" in e.message
    assert "mem_fraction_static" in (e.hint or "")  # the failure pattern's fix
    assert e.where == f"log {log}"


def test_a_failure_in_the_log_stops_the_wait_when_the_server_lingers(
    start: Callable[..., tuple[ready.Server, int, Path]],
) -> None:
    code = """
    import time
    print("NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error", flush=True)
    time.sleep(60)
    """
    server, port, _ = start(code)
    started = time.monotonic()
    try:
        with pytest.raises(KimiServeError) as err:
            ready.wait_until_ready(
                server, parse_target(f"127.0.0.1:{port}"), timeout=60, what="the child", failure_grace_s=0.5
            )
        assert time.monotonic() - started < 30  # not the whole start deadline
        assert err.value.exit_code == ExitCode.SERVER_EXITED
        assert "the child failed (nccl" in err.value.message and "did not exit" in err.value.message
    finally:
        server.stop(2)
        server.close()


def test_a_hung_distributed_init_stops_the_wait_before_the_deadline(
    start: Callable[..., tuple[ready.Server, int, Path]],
) -> None:
    """The same judgement as up's watch (kimi_serve/process/startup.py): two ranks begin init, one never ends it."""
    code = """
    import time
    print("[2026-12-03 07:00:00 TP0] Init parallel begin.", flush=True)
    print("[2026-12-03 07:00:00 TP1] Init parallel begin.", flush=True)
    print("[2026-12-03 07:00:01 TP0] Init parallel ends. elapsed=0.52 s", flush=True)
    time.sleep(60)
    """
    server, port, _ = start(code)
    started = time.monotonic()
    try:
        with pytest.raises(KimiServeError) as err:
            ready.wait_until_ready(
                server, parse_target(f"127.0.0.1:{port}"), timeout=60, what="the child", tp_size=2, init_timeout_s=1.0
            )
        assert time.monotonic() - started < 30  # not the whole start deadline
        assert err.value.exit_code == ExitCode.UNREACHABLE
        assert "distributed init hung: no 'Init parallel ends.' from rank(s) 1 within 1s" in err.value.message
    finally:
        server.stop(2)
        server.close()


def test_not_ready_by_the_deadline_is_3_and_names_the_phase(
    start: Callable[..., tuple[ready.Server, int, Path]],
) -> None:
    server, port, _ = start(SERVER, "0", "503")
    try:
        with pytest.raises(KimiServeError) as err:
            ready.wait_until_ready(server, parse_target(f"127.0.0.1:{port}"), timeout=1.5, what="the child")
        assert err.value.exit_code == ExitCode.UNREACHABLE
        assert "was not ready within 1.5s (phase: weights)" in err.value.message
        assert server.poll() is None  # the caller stops it
    finally:
        server.stop(5)
        server.close()


def test_a_program_that_cannot_start_is_5(tmp_path: Path) -> None:
    with pytest.raises(KimiServeError) as err:
        ready.start([str(tmp_path / "missing-python")], {}, tmp_path / "x.log", where="prof")
    assert err.value.exit_code == ExitCode.ENVIRONMENT
    assert "cannot start" in err.value.message and err.value.where == "prof"


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        pass


@contextmanager
def _other_server(port: int) -> Iterator[None]:
    """Another process's server on ``port`` (this test process: not the child's tree) answering /health 200."""
    other = http.server.HTTPServer(("127.0.0.1", port), _Health)
    thread = threading.Thread(target=other.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        other.shutdown()
        other.server_close()


def test_a_200_from_another_process_on_the_port_is_3_naming_it(
    start: Callable[..., tuple[ready.Server, int, Path]],
) -> None:
    """The port taken between the free-port pick (or the preflight) and the child's bind: the 200 is not the child's."""
    server, port, _ = start(SERVER, "30", "200")  # still loading: it binds only after 30 s
    try:
        with _other_server(port), pytest.raises(KimiServeError) as err:
            ready.wait_until_ready(server, parse_target(f"127.0.0.1:{port}"), timeout=20, what="the child")
        assert err.value.exit_code == ExitCode.UNREACHABLE
        comm = Path(f"/proc/{os.getpid()}/comm").read_text().strip()
        assert (
            err.value.message == f"port {port} is served by another process (pid {os.getpid()}, {comm}), not the child"
        )
        assert err.value.hint == ready.PORT_HINT and server.poll() is None  # the caller stops it
    finally:
        server.stop(5)
        server.close()


def test_a_200_from_a_process_of_the_childs_tree_is_ready(
    start: Callable[..., tuple[ready.Server, int, Path]],
) -> None:
    """Its kin: the port held by a grandchild (a forked worker, as uvicorn's) is the child's own server."""
    forks = (
        textwrap.dedent("""
    import os, signal, sys
    worker = os.fork()
    if worker:
        signal.signal(signal.SIGTERM, lambda *_: (os.kill(worker, signal.SIGKILL), sys.exit(0)))
        os.wait()
        sys.exit(0)
    """)
        + SERVER
    )
    server, port, _ = start(forks, "0", "200")
    try:
        assert ready.wait_until_ready(server, parse_target(f"127.0.0.1:{port}"), timeout=30, what="the child") < 30
    finally:
        server.stop(5)
        server.close()


def test_the_routers_port_served_by_another_process_is_3_before_its_workers_are_believed(
    tmp_path: Path, loopback_port: Callable[[], int]
) -> None:
    """`up`'s router (kimi_serve/up/replicas.py router_taken): the same check on the router `up` started."""
    from kimi_serve.check.launch import plan_deployment
    from kimi_serve.profile.loader import load_profile
    from kimi_serve.profile.member import Role
    from kimi_serve.up.replicas import router_taken

    port = loopback_port()
    deployment = plan_deployment(load_profile("sim-dp2", (f"router.port={port}",)))
    part = next(launch for m, launch in deployment.launches.items() if m.role is Role.ROUTER)
    server, _, _ = _start(tmp_path, port, SERVER, "30", "200")  # the router `up` started: not bound yet
    try:
        with _other_server(port):
            taken = router_taken(server, part)
            assert taken is not None and taken.code == ExitCode.UNREACHABLE
            assert taken.message.startswith(f"port {port} is served by another process (pid {os.getpid()}, ")
            assert taken.message.endswith(", not the router up started") and "--port" in taken.hint
    finally:
        server.stop(5)
        server.close()
    own, _, _ = _start(tmp_path, port, SERVER, "0", "200")  # the router itself on its port: nothing to say
    try:
        ready.wait_until_ready(own, parse_target(f"127.0.0.1:{port}"), timeout=30, what="the router")
        assert router_taken(own, part) is None
    finally:
        own.stop(5)
        own.close()


def test_another_process_on_another_address_of_the_port_counts_only_where_clients_land(
    start: Callable[..., tuple[ready.Server, int, Path]],
) -> None:
    """The child serves 127.0.0.1:P, another process 127.0.0.2:P: a client of 127.0.0.1 reaches the child (ready);
    one of a name (``localhost``, any address) may reach the other, so that is said."""
    server, port, _ = start(SERVER, "0", "200")
    try:
        ready.wait_until_ready(server, parse_target(f"127.0.0.1:{port}"), timeout=30, what="the child")
        with socket.socket() as other:
            other.bind(("127.0.0.2", port))
            other.listen()
            assert ready.port_taken(server.pid, f"http://127.0.0.1:{port}") is None
            taken = ready.port_taken(server.pid, f"http://localhost:{port}")
            assert taken is not None and f"(pid {os.getpid()}, " in taken
    finally:
        server.stop(5)
        server.close()
