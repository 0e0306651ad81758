"""HTTP with a hard deadline and bounded reads: every request ends by ``deadline`` (a ``time.monotonic()`` value) and
holds at most :data:`LIMITS` of what the server sends, whatever the server does.

A watchdog thread shuts the socket down at the deadline, from before the connect to the end of the body, so a server
that trickles or stalls (slowloris) cannot hold a probe past it. Reading stops at the body limit, the run's total
budget (:func:`read_limits`) and the server-sent-event limits (:attr:`Reply.limit` names which). gzip and deflate
bodies are decoded as the openai SDK's httpx does; one that does not decode gets :attr:`Reply.encoding_fault`.
``http.client``, not ``requests``: the deadline must cover the response head too (bounded by ``http.client``: 64 KiB a
line, 100 header lines). Proxies from the environment are not used: verify talks to the server itself.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from kimi_serve.core.http_body import (
    ACCEPTED_ENCODINGS,
    LIMITS,
    Limits,
    ReadBudget,
    SseCounter,
    cut_lines,
    decode,
    size_text,
)

CONNECT_TIMEOUT = 5.0
_CHUNK = 64 * 1024


class TransportError(Exception):
    """No HTTP response: ``kind`` is ``refused``, ``timeout``, ``reset`` (the server reset or closed the connection
    before its answer, twice: :func:`request` retries once) or ``connection`` (DNS, TLS, not HTTP, ...)."""

    def __init__(self, kind: str, detail: str, answered: str = "") -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.answered = answered  # what a peer that does not speak HTTP sent instead of a status line (its first line)


@dataclass(frozen=True)
class Reply:
    status: int
    content_type: str
    body: bytes
    timed_out: bool = False  # the deadline hit (or a stall) while the body was arriving; ``body`` is what came before
    cut: bool = False  # the connection broke while the body was arriving
    stalled: bool = False  # no bytes for ``stall_s`` once the body had started: stopped before the deadline
    idle_s: float = 0.0  # seconds from the last byte (or the response head) to the end of reading
    limit: str | None = None  # reading stopped at this limit (e.g. "16 MiB per response body"); ``body`` is the part
    encoding_fault: str | None = None  # the Content-Encoding the body does not match, in words (the SDK fails on it)


_current = (LIMITS, ReadBudget(LIMITS.total_bytes))  # the limits and the total budget of the run under way


_open, _open_lock = [0], threading.Lock()  # requests this process has open now (what a reset is reported under)


@contextlib.contextmanager
def _in_flight() -> Iterator[int]:
    with _open_lock:
        _open[0] += 1
        now = _open[0]
    try:
        yield now
    finally:
        with _open_lock:
            _open[0] -= 1


@contextlib.contextmanager
def read_limits(limits: Limits = LIMITS) -> Iterator[None]:
    """``limits`` and a fresh total-bytes budget for the requests made inside (one verify run, all its threads)."""
    global _current
    previous, _current = _current, (limits, ReadBudget(limits.total_bytes))
    try:
        yield
    finally:
        _current = previous


def _classify(exc: BaseException, fired: bool) -> TransportError:
    text = str(exc) or type(exc).__name__
    if fired or isinstance(exc, TimeoutError):
        return TransportError("timeout", "no answer before the deadline")
    if isinstance(exc, ssl.SSLError):
        return TransportError("connection", f"TLS error: {text[:200]}")
    if isinstance(exc, ConnectionRefusedError) or "refused" in text.lower():
        return TransportError("refused", "connection refused")
    if isinstance(exc, ConnectionResetError | ConnectionAbortedError | BrokenPipeError):  # RemoteDisconnected too
        return TransportError("reset", text[:200])
    if isinstance(exc, http.client.LineTooLong):
        return TransportError("connection", f"the response head has a line over 64 KiB ({text[:120]})")
    if isinstance(exc, http.client.BadStatusLine) and text.strip(" '\"\r\n"):  # its text: the line it read
        line = text.strip()[:160]
        return TransportError("connection", f"not an HTTP response: {type(exc).__name__}: {line}", answered=line)
    if isinstance(exc, http.client.HTTPException):
        return TransportError("connection", f"not an HTTP response: {type(exc).__name__}: {text[:160]}")
    return TransportError("connection", text[:200])


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise TransportError("connection", f"invalid port in {url!r}") from None
    host = parts.hostname or ""
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if parts.scheme == "https":
        return http.client.HTTPSConnection(host, port, timeout=timeout, context=ssl.create_default_context()), path
    return http.client.HTTPConnection(host, port, timeout=timeout), path


def request(
    method: str,
    url: str,
    *,
    deadline: float,
    api_key: str | None = None,
    json_body: dict[str, Any] | None = None,
    stall_s: float | None = None,
    limits: Limits | None = None,
    retry: bool = True,
    on_chunk: Callable[[bytes], None] | None = None,
) -> Reply:
    """Send one request and read the whole body (streamed or not) before ``deadline``, within the run's limits.
    ``on_chunk``: called with each piece of the body as it arrives (``chat`` shows a stream live), before decoding.

    ``stall_s`` (for streams): stop early when no bytes arrive for that long after the response head, so a hung
    stream is told apart from a slow one (which keeps sending and runs until the deadline). A connection the server
    resets (or closes) before its response head is tried once more; a second reset is a ``reset``
    :class:`TransportError` that says how many requests were open at once (a full accept backlog resets some).
    ``limits``: this request's own read limits and a budget of its own (``total_bytes``), instead of the run's
    (:func:`read_limits`): for a caller that polls for hours (the router's client). ``retry=False``: no second try
    (a request that changes something, which the server may have applied before it reset the connection).
    """
    bounds = _current if limits is None else (limits, ReadBudget(limits.total_bytes))
    with _in_flight() as open_now:
        try:
            return _request(method, url, deadline, api_key, json_body, stall_s, bounds, on_chunk)
        except TransportError as err:
            if err.kind != "reset" or not retry or deadline - time.monotonic() <= 0:
                raise
            busiest = max(open_now, _open[0])
        try:
            return _request(method, url, deadline, api_key, json_body, stall_s, bounds, on_chunk)
        except TransportError as again:
            if again.kind != "reset":
                raise
            busiest = max(busiest, _open[0])
            raise TransportError(
                "reset",
                f"the server reset the connection under {busiest} concurrent request(s) of kimi-serve, before "
                f"answering, also when tried again: {again.detail[:80]}",
            ) from None


def _request(
    method: str,
    url: str,
    deadline: float,
    api_key: str | None,
    json_body: dict[str, Any] | None,
    stall_s: float | None,
    bounds: tuple[Limits, ReadBudget],
    on_chunk: Callable[[bytes], None] | None,
) -> Reply:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TransportError("timeout", "no time left before the deadline")
    conn, path = _connection(url, min(CONNECT_TIMEOUT, remaining))
    fired, finished, headed = threading.Event(), threading.Event(), threading.Event()
    last, stalled = [time.monotonic()], [False]
    held: list[socket.socket] = []  # http.client drops conn.sock once the response owns it (Connection: close)

    def _watch() -> None:
        while not finished.wait(0.1 if stall_s else max(0.0, min(0.5, deadline - time.monotonic()))):
            now = time.monotonic()
            stalled[0] = stall_s is not None and headed.is_set() and now - last[0] >= stall_s
            if stalled[0] or now >= deadline:
                fired.set()
                sock = held[0] if held else conn.sock
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
                return

    threading.Thread(target=_watch, name="verify-watchdog", daemon=True).start()
    headers = {
        "Accept": "application/json, text/event-stream",
        "Accept-Encoding": ACCEPTED_ENCODINGS,  # what the openai SDK's httpx sends (without brotli/zstandard installed)
        "Connection": "close",
        **({"Content-Type": "application/json"} if json_body is not None else {}),
        **({"Authorization": f"Bearer {api_key}"} if api_key else {}),
    }
    try:
        data = json.dumps(json_body).encode() if json_body is not None else None
        try:
            conn.request(method, path, body=data, headers=headers)
            if conn.sock is not None:
                held.append(conn.sock)
                conn.sock.settimeout(None)  # the watchdog ends every read at the deadline
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise _classify(exc, fired.is_set()) from None
        headed.set()
        last[0] = time.monotonic()
        limits, budget = bounds
        content_type = resp.getheader("content-type", "") or ""
        sse = "text/event-stream" in content_type
        counter = SseCounter(limits) if sse else None
        most = limits.body_bytes if sse else limits.document_bytes
        kept = io.BytesIO()  # its getvalue() hands over the buffer: a body is never held twice (a list and its join)
        size, cut, limit = 0, False, None
        try:
            while True:
                chunk = resp.read1(_CHUNK)
                if not chunk:
                    break
                last[0] = time.monotonic()
                size += len(chunk)
                if size > most:
                    limit = f"{size_text(most)} per response body" + ("" if sse else " that is not a stream")
                elif not budget.take(len(chunk)):
                    limit = f"{size_text(budget.total)} in total for one verify run"
                elif counter is not None:
                    limit = counter.feed(chunk)
                if limit:
                    break
                kept.write(chunk)
                if on_chunk is not None:
                    on_chunk(chunk)
        except (OSError, http.client.HTTPException, ValueError):
            cut = True
        timed_out = fired.is_set()
        raw = kept.getvalue()
        kept.close()
        body, fault, decoded_limit = decode(resp.getheader("content-encoding", "") or "", raw, limits, budget, most)
        del raw
        if sse and decoded_limit is None and len(body) != size:  # decoded: count the lines the stream really has
            body, decoded_limit = cut_lines(body, limits.sse_lines)
        return Reply(
            resp.status,
            content_type,
            body,
            timed_out=timed_out,
            cut=cut and not timed_out,
            stalled=stalled[0],
            idle_s=time.monotonic() - last[0],
            limit=limit or decoded_limit,
            encoding_fault=fault,
        )
    finally:
        finished.set()
        conn.close()
