"""The start gates of deployment members that are not the contract: `wait-joined` (a rank >= 1 has joined rank 0) and
`wait-router` (the router reports a healthy worker). Real processes, real sockets and the real /proc: rank 0's TCP
store and the router's worker list are STAND-INS (a plain listening socket; an HTTP server answering GET /workers
with the shape sglang-router 0.3.2 sends, copied from a real one). The real router: tests/systemd/test_fleet_systemd.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from kimi_serve.service.gates import connected_to, leader_addresses

# its servers (or the code under test's port probes) bind loopback sockets: the listener tier
pytestmark = pytest.mark.usefixtures("loopback_port")


@pytest.fixture
def store() -> Iterator[int]:
    """STAND-IN for rank 0's torch.distributed TCP store at --dist-init-addr: accepts and holds connections."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(srv.getsockname()[1])
    finally:
        stop.set()
        thread.join(timeout=5)
        for c in held:
            c.close()
        srv.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


NODE = """
import socket, sys, time
store, port, connect, listen_after = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", float(sys.argv[4])
held = []
if connect:
    held.append(socket.create_connection(("127.0.0.1", store)))  # a scheduler's store client
time.sleep(max(listen_after, 0))
if listen_after >= 0:
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port)); srv.listen(4); held.append(srv)  # the dummy /health, once schedulers are ready
time.sleep(60)
"""


@pytest.fixture
def node() -> Iterator[Callable[..., tuple[int, int]]]:
    """A process standing in for a rank >= 1 node: (pid, port)."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(store: int, connect: bool, listen_after: float) -> tuple[int, int]:
        port = _free_port()
        wrapper = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {NODE!r}, *sys.argv[1:]])"
        p = subprocess.Popen(
            [sys.executable, "-c", wrapper, str(store), str(port), "1" if connect else "0", str(listen_after)],
            start_new_session=True,
        )  # a CHILD holds it, as SGLang's schedulers do
        procs.append(p)
        return p.pid, port

    yield start
    for p in procs:
        os.killpg(p.pid, signal.SIGKILL)  # the node and its child: only the group this test started
        p.wait(timeout=10)


def test_joined_once_connected_to_rank0_and_ready(cli: Any, store: int, node: Any) -> None:
    pid, port = node(store, True, 1.0)
    t0 = time.monotonic()
    r = cli("wait-joined", "--leader", f"127.0.0.1:{store}", "--port", str(port), "--pid", str(pid), "--wait", "30")
    assert r.code == 0, r.out + r.err
    assert "joined rank 0" in r.out and time.monotonic() - t0 < 30


def test_a_port_that_answers_is_not_enough(cli: Any, store: int, node: Any) -> None:
    pid, port = node(store, False, 0.0)  # the port answers at once (like the dummy /health), no link to rank 0
    r = cli("wait-joined", "--leader", f"127.0.0.1:{store}", "--port", str(port), "--pid", str(pid), "--wait", "3")
    assert r.code == 1 and "no TCP connection to rank 0's store" in r.out, r.out + r.err


def test_connected_but_not_ready(cli: Any, store: int, node: Any) -> None:
    pid, port = node(store, True, -1.0)  # joined the store, the schedulers never become ready
    r = cli("wait-joined", "--leader", f"127.0.0.1:{store}", "--port", str(port), "--pid", str(pid), "--wait", "3")
    assert r.code == 1 and "schedulers are not ready" in r.out, r.out + r.err


def test_the_server_exiting_ends_the_wait(cli: Any, store: int) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    r = cli(
        "wait-joined",
        "--leader",
        f"127.0.0.1:{store}",
        "--port",
        str(_free_port()),
        "--pid",
        str(gone.pid),
        "--wait",
        "30",
    )
    assert r.code == 1 and "exited before it joined" in r.out, r.out + r.err


def test_main_pid_comes_from_systemd(store: int, node: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    pid, port = node(store, True, 0.5)
    env = {"MAINPID": str(pid), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kimi_serve",
            "wait-joined",
            "--leader",
            f"127.0.0.1:{store}",
            "--port",
            str(port),
            "--wait",
            "30",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    no_pid = subprocess.run(
        [sys.executable, "-m", "kimi_serve", "wait-joined", "--leader", f"127.0.0.1:{store}", "--port", str(port)],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert no_pid.returncode == 2 and no_pid.stderr.startswith("kimi-serve: error: --pid: no server process")


def test_connection_seen_through_ipv4_mapped_and_names(store: int, node: Any) -> None:
    pid, _ = node(store, True, -1.0)
    assert leader_addresses("localhost", store) & {("127.0.0.1", store)}
    deadline = time.monotonic() + 20
    while not connected_to(pid, leader_addresses("127.0.0.1", store)):
        assert time.monotonic() < deadline, "the child's connection never showed in /proc"
        time.sleep(0.2)
    assert not connected_to(pid, leader_addresses("127.0.0.1", store + 1 if store < 65535 else store - 1))


# ---------------------------------------------------------------------------------------------- the router

REAL_SHAPE = {
    "id": "9c43d2a9-9b8b-4d0a-97af-bf5c6fe73a72",
    "model_id": "kimi-k2.5",
    "priority": 50,
    "cost": 1.0,
    "worker_type": "regular",
    "load": 0,
    "connection_mode": "HTTP",
    "disable_health_check": False,
}


@pytest.fixture
def router() -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """STAND-IN router: GET /workers answers the list it holds, in sglang-router 0.3.2's shape."""
    listed: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"workers": listed, "total": len(listed)}).encode()
            self.send_response(200 if self.path == "/workers" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield int(srv.server_address[1]), listed
    finally:
        srv.shutdown()
        srv.server_close()


def test_wait_router_waits_for_a_healthy_worker(cli: Any, router: tuple[int, list[dict[str, Any]]]) -> None:
    port, listed = router
    listed.append({**REAL_SHAPE, "url": "http://127.0.0.1:1", "is_healthy": False})
    r = cli("wait-router", "--host", f"127.0.0.1:{port}", "--wait", "2")
    assert r.code == 1 and "0/1 workers healthy" in r.out, r.out + r.err
    threading.Timer(1.0, lambda: listed.append({**REAL_SHAPE, "url": "http://127.0.0.1:2", "is_healthy": True})).start()
    r = cli("wait-router", "--host", f"127.0.0.1:{port}", "--wait", "30")
    assert r.code == 0 and "1/2 workers healthy" in r.out, r.out + r.err
    r = cli("wait-router", "--host", f"127.0.0.1:{_free_port()}", "--wait", "1")
    assert r.code == 1 and "not reachable" in r.out, r.out + r.err
