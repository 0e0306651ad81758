"""Readiness: refused -> 503 warming -> 200, and servers that never get ready (exit 3 within --wait)."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from contract_server import ContractServer

from kimi_serve.cli import main
from kimi_serve.verify import parse_target, run_verify, wait_ready

# its servers (or the code under test's port probes) bind loopback sockets: the listener tier
pytestmark = pytest.mark.usefixtures("loopback_port")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_refused_then_warming_then_ready() -> None:
    port = _free_port()
    srv = ContractServer(port=port, warm_for=1.0)
    starter = threading.Timer(1.0, srv.start)
    starter.start()
    seen: list[str] = []
    try:
        report = run_verify(
            f"127.0.0.1:{port}", wait=30, timeout=20, progress=lambda phase, waited, detail: seen.append(phase)
        )
    finally:
        starter.join()
        srv.stop()
    assert report.readiness.ready
    assert report.readiness.phases == ("refused", "warming", "ready")
    assert seen[0] == "refused" and seen[-1] == "ready" and "warming" in seen
    assert report.exit_code == 0


def test_never_ready_exits_3_within_the_wait(capsys) -> None:
    with ContractServer(warm_for=600) as srv:
        start = time.monotonic()
        code = main(["verify", "--host", srv.host, "--wait", "1.5", "--json"])
        took = time.monotonic() - start
    report = __import__("json").loads(capsys.readouterr().out)
    assert code == 3 and report["status"] == "unreachable"
    assert report["readiness"] == {**report["readiness"], "ready": False, "phase": "warming", "phases": ["warming"]}
    assert report["error"]["code"] == "not_ready" and "503" in report["error"]["message"]
    assert "--wait" in report["error"]["fix"]
    assert report["probes"] == []
    assert took < 1.5 + 3.0


def test_refused_without_wait_is_exit_3_at_once(capsys) -> None:
    code = main(["verify", "--host", f"127.0.0.1:{_free_port()}"])
    out = capsys.readouterr().out
    assert code == 3
    assert "connection refused" in out and "--wait SECONDS" in out


def test_health_that_never_answers_is_not_ready() -> None:
    with ContractServer(health_hang=True) as srv:
        readiness = wait_ready(parse_target(srv.host), time.monotonic() + 1.0, None, poll_timeout=0.5)
    assert not readiness.ready and readiness.phase == "no-answer"


def test_models_list_answering_early_is_not_readiness() -> None:
    # SGLang answers /v1/models during warmup; only /health counts, so verify must not start probing.
    with ContractServer(warm_for=600) as srv:
        report = run_verify(srv.host, wait=0.0, timeout=5)
        assert srv.requests == []
    assert report.exit_code == 3 and report.readiness.phase == "warming"


class _RawListener:
    """A loopback TCP port that is not an HTTP server: it sends ``greeting`` on accept (None: nothing, ever) and
    holds every connection open until stopped."""

    def __init__(self, greeting: bytes | None) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.greeting, self.held = greeting, []
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)
            if self.greeting:
                conn.sendall(self.greeting)

    def __enter__(self) -> _RawListener:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


SSH_BANNER = b"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13.5\r\n"


@pytest.mark.parametrize("wait", ["0", "1"])
def test_a_port_that_speaks_ssh_says_what_it_is(capsys, wait: str) -> None:
    with _RawListener(SSH_BANNER) as ssh:
        code = main(["verify", "--host", f"127.0.0.1:{ssh.port}", "--wait", wait])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 3
    assert f"127.0.0.1:{ssh.port} answered 'SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13.5', not HTTP" in last
    assert f"another service listens on 127.0.0.1:{ssh.port}" in last
    assert "--wait" not in last.split("(fix: ")[1]  # waiting does not turn SSH into HTTP


def test_a_port_that_accepts_and_never_answers_says_so(capsys) -> None:
    with _RawListener(None) as mute:
        start = time.monotonic()
        code = main(["verify", "--host", f"127.0.0.1:{mute.port}", "--timeout", "2"])
        took = time.monotonic() - start
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 3 and took < 2 + 3.0
    assert f"127.0.0.1:{mute.port} accepted the connection but sent no answer within 2s" in last
    assert f"ss -ltnp 'sport = :{mute.port}'" in last and "--wait" not in last.split("(fix: ")[1]


def test_a_refused_port_says_nothing_listens(capsys) -> None:
    port = _free_port()
    code = main(["verify", "--host", f"127.0.0.1:{port}"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 3
    assert f"connection refused: nothing listens on 127.0.0.1:{port}" in last
    assert "(fix: start the server, or pass --wait SECONDS" in last


@pytest.mark.parametrize("wait", ["1.5", "2"])
def test_the_wait_deadline_is_reported_as_given(capsys, wait: str) -> None:
    # the deadline said is the value given, never the last poll's time (--wait 5 said "not ready after 4.5s")
    with ContractServer(warm_for=600) as srv:
        code = main(["verify", "--host", srv.host, "--wait", wait])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 3
    assert f"server not ready after {wait}s (--wait {wait}): HTTP 503 on /health (warming up)" in last
    assert "raise --wait" in last


def test_a_server_that_stops_after_health_is_not_told_to_start(capsys) -> None:
    # /health answered 200, then the port closed: refused now means the server went away, not "start it"
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]

    def once() -> None:
        conn, _ = sock.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        conn.close()
        sock.close()

    server = threading.Thread(target=once, daemon=True)
    server.start()
    code = main(["verify", "--host", f"127.0.0.1:{port}"])
    server.join(5)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 3
    assert "connection refused: the server stopped listening after it answered /health" in last
    assert "it exited or restarted during the check: read its log" in last
