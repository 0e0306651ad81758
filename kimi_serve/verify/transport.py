"""HTTP with a hard deadline: every request ends by ``deadline`` (a ``time.monotonic()`` value), whatever the server
does.

``requests``' own timeouts bound the connect and each socket read; a watchdog thread shuts the socket down at the
deadline, so a server that streams a few bytes and then stalls (or trickles forever) cannot hold a probe past it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

CONNECT_TIMEOUT = 5.0


class TransportError(Exception):
    """No HTTP response: ``kind`` is ``refused``, ``timeout`` or ``connection`` (reset, DNS, TLS, ...)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True)
class Reply:
    status: int
    content_type: str
    body: bytes
    timed_out: bool = False  # the deadline hit (or a stall) while the body was arriving; ``body`` is what came before
    cut: bool = False  # the connection broke while the body was arriving
    stalled: bool = False  # no bytes for ``stall_s`` once the body had started: stopped before the deadline
    idle_s: float = 0.0  # seconds from the last byte (or the response head) to the end of reading


def _headers(api_key: str | None, json_body: bool) -> dict[str, str]:
    headers = {"Accept": "application/json, text/event-stream"}
    if json_body:
        headers["Content-Type"] = "application/json"
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def _classify(exc: Exception) -> TransportError:
    import requests

    text = str(exc)
    if isinstance(exc, requests.exceptions.Timeout):
        return TransportError("timeout", "no answer before the deadline")
    if isinstance(exc, requests.exceptions.SSLError):
        return TransportError("connection", f"TLS error: {text[:200]}")
    if "refused" in text.lower():
        return TransportError("refused", "connection refused")
    return TransportError("connection", text[:200])


def request(
    method: str,
    url: str,
    *,
    deadline: float,
    api_key: str | None = None,
    json_body: dict[str, Any] | None = None,
    stall_s: float | None = None,
) -> Reply:
    """Send one request and read the whole body (streamed or not) before ``deadline``.

    ``stall_s`` (for streams): stop early when no bytes arrive for that long after the response head, so a hung
    stream is told apart from a slow one (which keeps sending and runs until the deadline).
    """
    import requests

    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TransportError("timeout", "no time left before the deadline")
    try:
        resp = requests.request(
            method,
            url,
            json=json_body,
            headers=_headers(api_key, json_body is not None),
            stream=True,
            timeout=(min(CONNECT_TIMEOUT, remaining), remaining),
        )
    except requests.RequestException as exc:
        raise _classify(exc) from None
    fired = threading.Event()
    finished = threading.Event()
    last = [time.monotonic()]
    stalled = [False]

    def _stop() -> None:
        fired.set()
        try:
            resp.raw.shutdown()
        except (ValueError, RuntimeError, OSError):
            resp.close()

    def _watch() -> None:
        while not finished.wait(0.1 if stall_s else max(0.0, deadline - time.monotonic())):
            now = time.monotonic()
            if stall_s is not None and now - last[0] >= stall_s:
                stalled[0] = True
                _stop()
                return
            if now >= deadline:
                _stop()
                return

    watchdog = threading.Thread(target=_watch, name="verify-watchdog", daemon=True)
    watchdog.start()
    chunks: list[bytes] = []
    cut = False
    try:
        for chunk in resp.iter_content(chunk_size=None):
            chunks.append(chunk)
            last[0] = time.monotonic()
            if last[0] >= deadline:
                fired.set()
                break
    except (requests.RequestException, OSError, ValueError):
        cut = True
    finally:
        finished.set()
        resp.close()
    timed_out = fired.is_set()
    return Reply(
        resp.status_code,
        resp.headers.get("content-type", ""),
        b"".join(chunks),
        timed_out=timed_out,
        cut=cut and not timed_out,
        stalled=stalled[0],
        idle_s=time.monotonic() - last[0],
    )
