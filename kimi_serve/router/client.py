"""What SGLang's router (sglang-router 0.3.2) says about its workers: ``GET /readiness`` and ``GET /workers``.

Measured on 0.3.2: ``/readiness`` answers 200 ``{"status": "ready", "healthy_workers": H, "total_workers": T}`` while at
least one worker is healthy and 503 ``{"status": "not ready", ...}`` with none; ``/workers`` lists each worker with its
``url`` and ``is_healthy``; ``/health`` and ``/liveness`` answer 200 whenever the router itself runs (they say nothing
about workers). A worker turns unhealthy after ``--health-failure-threshold`` failed checks
``--health-check-interval-secs`` apart (and healthy again after 2 good ones). With ``--api-key``, ``/workers`` and
the inference routes need the key (401 without) while ``/readiness``, ``/health`` and ``/v1/models`` stay open; the
key is sent whenever given. Used by `up` (ready = every worker healthy) and by the rolling restart (never leave the
router with zero healthy workers: :meth:`RouterHealth.others_healthy`). Standard library only.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from kimi_serve.profile.loader import Profile

POLL_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class WorkerHealth:
    url: str  # as the router names it: http://HOST:PORT
    healthy: bool


@dataclass(frozen=True)
class RouterHealth:
    reachable: bool  # the router answered /readiness at all
    ready: bool  # /readiness 200 (at least one healthy worker)
    healthy: int
    total: int
    workers: tuple[WorkerHealth, ...] = ()
    detail: str = ""  # why not reachable, or the router's reason

    @property
    def all_healthy(self) -> bool:
        return self.reachable and self.total > 0 and self.healthy == self.total

    def worker(self, url: str) -> WorkerHealth | None:
        return next((w for w in self.workers if w.url.rstrip("/") == url.rstrip("/")), None)

    def others_healthy(self, url: str) -> int:
        """Healthy workers besides ``url``: taking that one down leaves the router this many (a rolling restart
        needs at least 1)."""
        return sum(w.healthy for w in self.workers if w.url.rstrip("/") != url.rstrip("/"))

    def line(self) -> str:
        if not self.reachable:
            return f"router unreachable: {self.detail}"
        sick = [w.url for w in self.workers if not w.healthy]
        return (
            f"{self.healthy}/{self.total} workers healthy"
            + (f" (unhealthy: {', '.join(sick)})" if sick else "")
            + ("" if self.ready else f"; not ready: {self.detail or 'no healthy worker'}")
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "reachable": self.reachable,
            "ready": self.ready,
            "healthy_workers": self.healthy,
            "total_workers": self.total,
            "detail": self.detail,
            "workers": [{"url": w.url, "healthy": w.healthy} for w in self.workers],
        }


def router_url(profile: Profile) -> str:
    """Where clients reach the profile's router (a wildcard bind address means this machine's loopback)."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(profile.router.host, profile.router.host)
    return f"http://[{host}]:{profile.router.port}" if ":" in host else f"http://{host}:{profile.router.port}"


def deployment_targets(profile: Profile) -> list[tuple[str, str]]:
    """(name, URL) of every part `verify --profile` checks: the router first, then each replica
    (:func:`kimi_serve.profile.topology.replicas`)."""
    from kimi_serve.profile.topology import replicas

    return [("router", router_url(profile)), *((f"replica {r.index}", r.url) for r in replicas(profile))]


def _get(url: str, api_key: str | None, timeout: float) -> tuple[int, Any]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, body = resp.status, resp.read()
    except urllib.error.HTTPError as err:
        status, body = err.code, err.read()
    try:
        return status, json.loads(body or b"null")
    except ValueError:
        return status, None


def router_health(base_url: str, api_key: str | None = None, timeout: float = POLL_TIMEOUT_S) -> RouterHealth:
    """One look at the router: /readiness, then /workers. Never raises for a router that is down or odd."""
    base = base_url.rstrip("/")
    try:
        status, ready = _get(base + "/readiness", api_key, timeout)
        if status in (401, 403):
            return RouterHealth(True, False, 0, 0, (), f"HTTP {status} on /readiness (wrong or missing API key)")
        w_status, listed = _get(base + "/workers", api_key, timeout)
    except (OSError, urllib.error.URLError) as exc:
        reason = getattr(exc, "reason", exc)
        return RouterHealth(False, False, 0, 0, (), str(reason))
    ready = ready if isinstance(ready, dict) else {}
    entries = listed.get("workers") if w_status == 200 and isinstance(listed, dict) else None
    workers = tuple(
        WorkerHealth(str(e.get("url", "?")), bool(e.get("is_healthy"))) for e in entries or [] if isinstance(e, dict)
    )
    healthy = sum(w.healthy for w in workers) if entries is not None else int(ready.get("healthy_workers") or 0)
    total = len(workers) if entries is not None else int(ready.get("total_workers") or 0)
    reason = str(ready.get("reason") or "") if status != 200 else ""
    return RouterHealth(True, status == 200, healthy, total, workers, reason)


def wait_healthy(
    base_url: str, deadline: float, api_key: str | None = None, *, want: int | None = None, interval: float = 0.5
) -> RouterHealth:
    """Poll until ``want`` workers (default: all of them) are healthy or ``deadline`` (time.monotonic) passes; the
    last view either way."""
    while True:
        view = router_health(base_url, api_key, timeout=max(0.5, min(POLL_TIMEOUT_S, deadline - time.monotonic())))
        enough = view.all_healthy if want is None else (view.reachable and view.healthy >= want)
        if enough or time.monotonic() + interval >= deadline:
            return view
        time.sleep(interval)
