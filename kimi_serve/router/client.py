"""What SGLang's router (sglang-router 0.3.2) says about its workers (``GET /readiness``, ``GET /workers``), and
changing them: ``DELETE /workers/ID`` and ``POST /workers {"url": URL}`` (both queued, answered 202), which the rolling
restart drives through :mod:`kimi_serve.service.rotation`.

Measured on 0.3.2: ``/readiness`` answers 200 ``{"status": "ready", "healthy_workers": H, "total_workers": T}`` while
a worker is healthy, 503 ``{"status": "not ready", ...}`` with none; ``/workers`` lists each worker's ``url`` and
``is_healthy``; ``/health`` and ``/liveness`` say nothing about workers. A worker turns unhealthy after
``--health-failure-threshold`` failed checks ``--health-check-interval-secs`` apart (healthy again after 2 good ones).
``/readiness``, ``/health`` and ``/v1/models`` need no key; with ``--control-plane-api-keys`` (the shim sets it for a
keyed router) ``/workers`` takes only the key file's ``admin-api-key`` (:func:`admin_key_of`) and refuses the
clients' key (401). The key is sent whenever given.

Every request ends within its timeout (:mod:`kimi_serve.core.http`'s deadline transport, also against a router that
trickles) and reads at most :data:`ROUTER_LIMITS`; its JSON is decoded within :mod:`kimi_serve.core.inputs`' depth
bound, so an oversized or deeply nested answer reads as no list, never a crash.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimi_serve.core.http import Reply, TransportError, request
from kimi_serve.core.http_body import Limits
from kimi_serve.core.inputs import load_json
from kimi_serve.core.report import json_meta

POLL_TIMEOUT_S = 5.0
REMOVE_POLL_S = 0.5  # how often a removal is checked until the router no longer lists the worker
# What one answer of the router may be: sglang-router 0.3.2's /workers lists a few hundred bytes a worker. A router
# that sends more, or JSON nested past core/inputs.py's depth, is read as one that sent no list (never exit 70), and
# each request reads within its own bounds (a poller that runs for days never exhausts a shared budget).
ROUTER_LIMITS = Limits(body_bytes=1024 * 1024, document_bytes=1024 * 1024, total_bytes=2 * 1024 * 1024)


def _send(method: str, url: str, api_key: str | None, timeout: float, body: dict[str, str] | None = None) -> Reply:
    deadline = time.monotonic() + timeout
    return request(  # a reset GET is asked again; a change (DELETE, POST) is not sent twice
        method, url, deadline=deadline, api_key=api_key, json_body=body, limits=ROUTER_LIMITS, retry=method == "GET"
    )


def _json(body: bytes) -> Any:
    """The router's JSON within the bounds; None when it is not JSON or is past them."""
    try:
        return load_json(body or b"null")
    except ValueError:
        return None


@dataclass(frozen=True)
class Worker:
    url: str  # as the router names it: http://HOST:PORT
    healthy: bool


@dataclass(frozen=True)
class RouterHealth:
    reachable: bool  # the router answered /readiness at all
    ready: bool  # /readiness 200 (at least one healthy worker)
    healthy: int = field(metadata=json_meta(key="healthy_workers"))
    total: int = field(metadata=json_meta(key="total_workers"))
    workers: tuple[Worker, ...] = ()
    detail: str = ""  # why not reachable, or the router's reason
    listed: bool = False  # /workers answered with the list (the key opened the control plane)

    def worker(self, url: str) -> Worker | None:
        return next((w for w in self.workers if w.url.rstrip("/") == url.rstrip("/")), None)

    def membership(self, expected: Iterable[str]) -> tuple[list[str], list[str]]:
        """(missing, unexpected): the ``expected`` worker URLs the router does not list, and the workers it lists that
        are not expected (someone added or removed workers behind kimi-serve's back). Both empty when /workers was
        not read (:attr:`listed` false): nothing is known then."""
        if not self.listed:
            return [], []
        want = [u.rstrip("/") for u in expected]
        have = [w.url.rstrip("/") for w in self.workers]
        return [u for u in want if u not in have], [u for u in have if u not in want]

    def membership_line(self, expected: Iterable[str]) -> str:
        """One line naming how the router's workers differ from ``expected``; "" when they do not."""
        missing, unexpected = self.membership(expected)
        parts = ([f"unexpected: {', '.join(unexpected)}"] if unexpected else []) + (
            [f"missing: {', '.join(missing)}"] if missing else []
        )
        return f"the router's workers are not the profile's replicas ({'; '.join(parts)})" if parts else ""

    def healthy_of(self, expected: Sequence[str]) -> int:
        """Healthy workers among ``expected`` (the replicas' URLs); without the list, the router's count, capped."""
        if not self.listed:
            return min(self.healthy, len(expected))
        want = {u.rstrip("/") for u in expected}
        return sum(w.healthy for w in self.workers if w.url.rstrip("/") in want)

    def serves_all(self, expected: Sequence[str]) -> bool:
        """Every expected worker is registered and healthy: what `up` of a replicated profile waits for (a router that
        holds 1 of 2 replicas reports 1/1 healthy, which is not the deployment ready)."""
        return self.reachable and bool(expected) and self.healthy_of(expected) == len(expected)

    def line(self, expected: Sequence[str] | None = None) -> str:
        """``expected``: the replicas' URLs; the count is then against them, not against what the router lists."""
        if not self.reachable:
            return f"router unreachable: {self.detail}"
        sick = [w.url for w in self.workers if not w.healthy]
        if expected is None:
            head, ready = f"{self.healthy}/{self.total} workers healthy", self.ready
        else:
            missing, _unexpected = self.membership(expected)
            head = f"{self.healthy_of(expected)}/{len(expected)} expected workers healthy"
            if missing:
                head += f" (not registered: {', '.join(missing)})"
            elif not self.listed and self.total < len(expected):
                head += f" (the router lists {self.total})"
            ready = self.ready and self.serves_all(expected)
        why = self.detail or ("no healthy worker" if not self.ready else "not every replica is healthy yet")
        return head + (f" (unhealthy: {', '.join(sick)})" if sick else "") + ("" if ready else f"; not ready: {why}")


def _get(url: str, api_key: str | None, timeout: float) -> tuple[int, Any]:
    """One GET that ends within ``timeout`` whatever the router does (verify's deadline transport: a router that
    trickles its answer a byte at a time cannot hold `up`, wait-router or the rolling restart past it)."""
    reply = _send("GET", url, api_key, timeout)
    if reply.timed_out or reply.cut:
        raise TransportError("timeout" if reply.timed_out else "connection", f"incomplete answer from {url}")
    return reply.status, None if reply.limit else _json(reply.body)  # past the limit: it answered, with no list


def _count(value: Any) -> int:
    """A worker count the router sent: a whole number, else 0 (not ``true``, ``"2"``, ``NaN`` or ``Infinity``)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def router_health(base_url: str, api_key: str | None = None, timeout: float = POLL_TIMEOUT_S) -> RouterHealth:
    """One look at the router: /readiness, then /workers. ``api_key``: the control plane's admin key
    (:func:`admin_key_of`), which /workers needs. Never raises for a router that is down or odd."""
    base = base_url.rstrip("/")
    try:
        status, ready = _get(base + "/readiness", api_key, timeout)
        if status in (401, 403):
            return RouterHealth(True, False, 0, 0, (), f"HTTP {status} on /readiness (wrong or missing API key)")
        w_status, listed = _get(base + "/workers", api_key, timeout)
    except TransportError as exc:
        return RouterHealth(False, False, 0, 0, (), exc.detail)
    ready = ready if isinstance(ready, dict) else {}
    entries = listed.get("workers") if w_status == 200 and isinstance(listed, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        entries = None  # not the list sglang-router sends: nothing is known of the workers
    workers = tuple(Worker(str(e.get("url", "?")), bool(e.get("is_healthy"))) for e in entries or [])
    healthy = sum(w.healthy for w in workers) if entries is not None else _count(ready.get("healthy_workers"))
    total = len(workers) if entries is not None else _count(ready.get("total_workers"))
    reason = str(ready.get("reason") or "") if status != 200 else ""
    return RouterHealth(True, status == 200, healthy, total, workers, reason, entries is not None)


# ------------------------------------------------------------------- the worker list, and changing it


def router_workers(endpoint: str, api_key: str | None, timeout: float = POLL_TIMEOUT_S) -> list[Worker] | str:
    """The router's workers (``GET /workers``), or why they could not be read (one line)."""
    url = f"http://{endpoint}/workers"
    try:
        reply = _send("GET", url, api_key, timeout)
    except TransportError as err:
        return f"router {endpoint} not reachable ({err.kind}: {err.detail})"
    if reply.status != 200:
        return f"router {endpoint} answered HTTP {reply.status} to GET /workers"
    try:
        data: Any = _json(reply.body) if not reply.limit else None
        return [Worker(str(w["url"]).rstrip("/"), bool(w.get("is_healthy"))) for w in data["workers"]]
    except (KeyError, TypeError, AttributeError):
        return f"router {endpoint}: GET /workers is not the worker list sglang-router 0.3.2 sends"


def _call(method: str, url: str, api_key: str | None, body: dict[str, str] | None = None) -> tuple[int, bytes] | str:
    try:
        reply = _send(method, url, api_key, POLL_TIMEOUT_S, body)
    except TransportError as err:
        return f"{method} {url}: {err.kind}: {err.detail}"
    return reply.status, b"" if reply.limit else reply.body


def worker_ids(endpoint: str, api_key: str | None) -> dict[str, str] | str:
    """url -> the router's worker id (needed to remove one), or why the list could not be read."""
    got = _call("GET", f"http://{endpoint}/workers", api_key)
    if isinstance(got, str) or got[0] != 200:
        return got if isinstance(got, str) else f"GET /workers: HTTP {got[0]}"
    try:
        return {str(w["url"]).rstrip("/"): str(w["id"]) for w in _json(got[1])["workers"]}
    except (KeyError, TypeError, AttributeError):
        return "GET /workers is not the worker list sglang-router 0.3.2 sends"


def delete_worker(endpoint: str, api_key: str | None, worker_id: str) -> int | str:
    """``DELETE /workers/ID`` alone: the router's HTTP status (200, 202 or 204: accepted, applied when the router
    gets to it), or why no answer came (it may have been applied all the same)."""
    got = _call("DELETE", f"http://{endpoint}/workers/{worker_id}", api_key)
    return got if isinstance(got, str) else got[0]


def post_worker(endpoint: str, api_key: str | None, url: str) -> str | None:
    """``POST /workers {"url": URL}`` alone, whatever the list says: None when accepted, else why not."""
    got = _call("POST", f"http://{endpoint}/workers", api_key, {"url": url})
    if isinstance(got, str) or got[0] not in (200, 201, 202):
        return got if isinstance(got, str) else f"POST /workers {url}: HTTP {got[0]}"
    return None


def healthy_count(workers: list[Worker], exclude: str | None = None) -> int:
    return sum(1 for w in workers if w.healthy and w.url != exclude)


def admin_key_of(key_file: str | Path | None) -> str | None:
    """The router control plane's key: the key file's ``admin-api-key`` (None without a file, or when it holds none,
    or cannot be read: then /workers is not read, and the counts come from /readiness)."""
    if not key_file:
        return None
    from kimi_serve.core.errors import KimiServeError
    from kimi_serve.core.keyfile import read_admin_key

    try:
        return read_admin_key(Path(key_file))
    except KimiServeError:
        return None
