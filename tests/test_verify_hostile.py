"""verify against hostile servers: it ends within --timeout plus a few seconds and holds no more than its read limits
(transport.Limits), whatever a server sends: an endless body or stream, one endless line, a head or a body trickled a
byte at a time. Each fails with a finding that names what happened (and the limit it hit); memory is measured in
benchmarks/bench_verify_hostile.py, not here."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

import pytest
from contract_server import ContractServer

from kimi_serve.core.http import LIMITS, Limits, read_limits, request
from kimi_serve.verify import run_verify
from kimi_serve.verify.wire import MAX_CONTAINERS

KIB = 1024
SMALL = Limits(
    body_bytes=256 * KIB, document_bytes=256 * KIB, total_bytes=2048 * KIB, sse_line_bytes=32 * KIB, sse_events=500
)
SLACK = 5.0  # the bound: --timeout plus this; each request ends at the deadline on its own


def _chat(srv: ContractServer, *, stream: bool = False, within: float = 5.0):  # type: ignore[no-untyped-def]
    body = {"model": srv.served_model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    return request("POST", f"http://{srv.host}/v1/chat/completions", deadline=time.monotonic() + within, json_body=body)


def test_reading_an_endless_body_stops_at_the_body_limit(loopback_port: Callable[[], int]) -> None:
    with ContractServer("endless-body", port=loopback_port()) as srv, read_limits(SMALL):
        reply = _chat(srv)
    assert reply.limit == f"{256 * KIB} bytes per response body that is not a stream"
    assert len(reply.body) <= SMALL.body_bytes  # what is held: at most the limit (bytes counted)
    assert not reply.timed_out


def test_the_total_budget_is_shared_by_every_request_of_a_run(loopback_port: Callable[[], int]) -> None:
    limits = Limits(body_bytes=1024 * KIB, document_bytes=1024 * KIB, total_bytes=1536 * KIB)
    with ContractServer("endless-body", port=loopback_port()) as srv, read_limits(limits):
        first, second = _chat(srv), _chat(srv)
    assert first.limit == "1 MiB per response body that is not a stream"
    assert second.limit == f"{1536 * KIB} bytes in total for one verify run"
    assert len(first.body) + len(second.body) <= limits.total_bytes


@pytest.mark.parametrize(
    ("mode", "limit"),
    [
        ("endless-body", f"{256 * KIB} bytes per response body that is not a stream"),
        ("endless-stream", "500 events per stream"),
        ("huge-line", f"{32 * KIB} bytes per server-sent-event line"),
    ],
)
def test_endless_answers_fail_at_a_named_limit_within_the_deadline(
    mode: str, limit: str, loopback_port: Callable[[], int]
) -> None:
    with ContractServer(mode, port=loopback_port()) as srv:
        started = time.monotonic()
        report = run_verify(srv.host, timeout=10.0, limits=SMALL)
        took = time.monotonic() - started
    assert report.exit_code == 1
    assert took < 10.0 + SLACK
    chat = [p for p in report.probes if p.probe != "raw"]
    assert chat and all(not p.passed for p in chat), [(p.probe, p.mode, p.findings) for p in chat]
    cut = [f for p in chat for f in p.findings if f.code == "too_large"]
    assert cut, [p.findings for p in chat]
    assert any(limit in f.message for f in cut), {f.message for f in cut}
    assert all("read limit" in f.message and "endless or oversized" in f.fix for f in cut)


def test_the_default_limits_hold_an_endless_stream_too(loopback_port: Callable[[], int]) -> None:
    """With verify's own limits (no test sizes): every stream probe is cut at one of them, well before --timeout."""
    with ContractServer("endless-stream", port=loopback_port()) as srv:
        report = run_verify(srv.host, timeout=20.0)
    streams = [p for p in report.probes if p.mode == "stream"]
    assert report.exit_code == 1 and streams
    for p in streams:
        assert [f.code for f in p.findings] == ["too_large"], p.findings  # the whole events before the cut are sound
        assert any(
            text in p.findings[0].message
            for text in (
                f"{LIMITS.sse_events} events",
                "MiB per response body",
                "in total for one verify run",
                f"{MAX_CONTAINERS} JSON objects and lists per answer",
            )
        )
    assert report.elapsed_s < 20.0 + SLACK


@pytest.mark.parametrize("mode", ["trickle-head", "trickle-body"])
def test_a_trickling_server_cannot_hold_verify_past_the_deadline(mode: str, loopback_port: Callable[[], int]) -> None:
    """Slowloris: a byte every 0.2 s keeps every socket read short, so only a deadline on the whole request ends it."""
    timeout = 2.0
    with ContractServer(mode, port=loopback_port()) as srv:
        started = time.monotonic()
        report = run_verify(srv.host, timeout=timeout)
        took = time.monotonic() - started
    assert report.exit_code == 1
    assert took < timeout + SLACK, took
    chat = [p for p in report.probes if p.probe != "raw"]
    assert chat and all(p.findings and p.findings[0].code in ("timeout", "too_slow") for p in chat), [
        (p.probe, p.mode, p.findings) for p in chat
    ]


def test_cli_names_the_limit_and_ends_in_time(
    loopback_port: Callable[[], int], cli: Callable[..., object], capsys: pytest.CaptureFixture[str]
) -> None:
    with ContractServer("huge-line", port=loopback_port()) as srv:
        started = time.monotonic()
        result = cli("verify", "--host", srv.host, "--timeout", "10")
        took = time.monotonic() - started
    assert result.code == 1  # type: ignore[attr-defined]
    assert "per server-sent-event line" in result.out + result.err  # type: ignore[attr-defined]
    assert "Traceback" not in result.out + result.err  # type: ignore[attr-defined]
    assert took < 10 + SLACK


def test_the_router_client_ends_within_its_timeout_against_a_trickling_router(
    loopback_port: Callable[[], int],
) -> None:
    """`up`'s router watch, wait-router and the rolling restart read the router through router_health: a router whose
    answer trickles in a byte at a time (it used to hold urllib's per-read timeout forever) is "unreachable" within
    the timeout."""
    import contextlib
    import socket
    import threading

    from kimi_serve.router.client import router_health

    port, stop, conns = loopback_port(), threading.Event(), []
    listener = socket.create_server(("127.0.0.1", port))

    def _serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conns.append(conn)
            threading.Thread(target=_trickle, args=(conn,), daemon=True).start()

    def _trickle(conn: socket.socket) -> None:
        head = b"HTTP/1.1 200 OK\r\nX-Trickle: "
        n = 0
        with contextlib.suppress(OSError):
            while not stop.wait(0.2):
                conn.sendall(head[n : n + 1] or b"a")
                n += 1

    server = threading.Thread(target=_serve, daemon=True)
    server.start()
    try:
        started = time.monotonic()
        view = router_health(f"http://127.0.0.1:{port}", timeout=1.5)
        assert time.monotonic() - started < 1.5 + SLACK
        assert not view.reachable and "deadline" in view.detail, view
    finally:
        stop.set()
        server.join(5)
        listener.close()
        for conn in conns:
            conn.close()


class _Router:
    """A router stand-in (not sglang-router) that answers every GET with one fixed body (its bytes counted)."""

    def __init__(self, port: int, bodies: dict[str, bytes]) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                body = bodies.get(self.path.split("?")[0], b'{"status": "ready"}')
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"127.0.0.1:{port}"

    def __enter__(self) -> _Router:
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


_DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(
    "workers",
    [
        _DEEP,  # RecursionError before: exit 70 in the rolling restart and `up`'s router watch
        b'{"workers": ' + _DEEP + b"}",
        b'{"workers": [' + b'{"url": "http://x:1", "id": "a", "is_healthy": true},' * 40_000 + b"{}]}",  # 2 MiB
        b'{"workers": "all"}',
        b'{"workers": [1, "a", null]}',
    ],
    ids=["deep", "deep-list", "oversized", "a-string", "not-objects"],
)
def test_the_router_client_reads_hostile_worker_lists_as_no_list(
    workers: bytes, loopback_port: Callable[[], int]
) -> None:
    """GET /workers within the router client's own bounds (1 MiB an answer, core/inputs.py's depth): an answer past
    them, or not the list sglang-router sends, is "not the worker list", never a crash."""
    from kimi_serve.router.client import router_health, router_workers, worker_ids

    with _Router(loopback_port(), {"/workers": workers}) as router:
        listed = router_workers(router.endpoint, None, timeout=5)
        ids = worker_ids(router.endpoint, None)
        view = router_health(f"http://{router.endpoint}", timeout=5)
    assert isinstance(listed, str) and isinstance(ids, str), (listed, ids)
    assert "worker list" in listed or "not reachable" in listed, listed
    assert view.reachable and not view.listed and view.workers == (), view


@pytest.mark.parametrize("count", [b"Infinity", b"NaN", b'"2"', b"[2]", b"true", b"-3", b"1e400"])
def test_the_router_client_reads_odd_worker_counts_as_none(count: bytes, loopback_port: Callable[[], int]) -> None:
    from kimi_serve.router.client import router_health

    readiness = b'{"status": "ready", "healthy_workers": ' + count + b', "total_workers": ' + count + b"}"
    with _Router(loopback_port(), {"/readiness": readiness, "/workers": b"{}"}) as router:
        view = router_health(f"http://{router.endpoint}", timeout=5)
    assert view.reachable and (view.healthy, view.total) == (0, 0), view


def test_the_router_client_has_a_budget_of_its_own(loopback_port: Callable[[], int]) -> None:
    """A poller that runs for days (`up`'s router watch) reads within each request's own bounds: the run-wide
    budget of a verify run never cuts the router's answers, however much was read before."""
    from kimi_serve.router.client import router_workers

    body = b'{"workers": [{"url": "http://127.0.0.1:30010", "id": "a", "is_healthy": true}]}'
    with _Router(loopback_port(), {"/workers": body}) as router, read_limits(Limits(total_bytes=16)):
        listed = [router_workers(router.endpoint, None, timeout=5) for _ in range(3)]
    assert all(isinstance(w, list) and [x.url for x in w] == ["http://127.0.0.1:30010"] for w in listed), listed
