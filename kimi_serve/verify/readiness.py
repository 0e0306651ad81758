"""Wait until SGLang is ready: refused (loading weights, capturing graphs) -> 503 on /health (warmup) -> 200.

``/v1/models`` answers before warmup ends, so only ``/health`` counts (docs/verify.md, "Readiness"). A port that
never gets ready says why, so its fix can name the cause (:func:`not_ready`): nothing listens (refused), something
listens and never answers (no-answer), or it speaks another protocol (not-http, e.g. an SSH server's banner).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import urlsplit

from kimi_serve.core.http import TransportError, request
from kimi_serve.verify.report import Readiness
from kimi_serve.verify.target import Target

Progress = Callable[[str, float, str], None]  # (phase, seconds waited, detail)
POLL_INTERVAL = 0.5
POLL_TIMEOUT = 5.0

_DETAIL = {
    "refused": "connection refused: nothing listens on {address}",
    "no-answer": "{address} accepted the connection but sent no answer within {timeout:g}s",
    "warming": "HTTP 503 on /health (warming up)",
    "ready": "HTTP 200 on /health",
    "no-health-endpoint": "HTTP 404 on /health: no readiness signal, going on",
}
_BY_STATUS = {200: "ready", 503: "warming", 404: "no-health-endpoint"}  # /health's answer -> the phase


def address(target: Target) -> str:
    """HOST:PORT of ``target`` (as a connection refusal names it)."""
    return urlsplit(target.base_url).netloc


def _poll(target: Target, poll_end: float, api_key: str | None) -> tuple[str, str]:
    timeout = max(0.0, poll_end - time.monotonic())
    try:
        reply = request("GET", target.url("/health"), deadline=poll_end, api_key=api_key)
    except TransportError as err:
        if err.answered:  # another protocol's greeting (an SSH server's banner), not a status line
            return "not-http", f"{address(target)} answered {err.answered!r}, not HTTP"
        phase = {"refused": "refused", "timeout": "no-answer"}.get(err.kind)
        if phase is None:
            return "unreachable", f"cannot connect: {err.detail}"
    else:
        phase = "no-answer" if reply.timed_out else _BY_STATUS.get(reply.status)
        if phase is None:
            return f"http-{reply.status}", f"HTTP {reply.status} on /health"
    return phase, _DETAIL[phase].format(address=address(target), timeout=round(timeout))


def wait_ready(
    target: Target,
    deadline: float,
    progress: Progress | None = None,
    *,
    api_key: str | None = None,
    interval: float = POLL_INTERVAL,
    poll_timeout: float = POLL_TIMEOUT,
) -> Readiness:
    """Poll ``/health`` until it answers 200 or ``deadline`` (a ``time.monotonic()`` value) passes.

    One poll always happens: a deadline in the past means "check once" (that poll may take ``poll_timeout``).
    """
    start = time.monotonic()
    phases: list[str] = []
    while True:
        now = time.monotonic()
        phase, detail = _poll(
            target, now + poll_timeout if deadline <= now else min(deadline, now + poll_timeout), api_key
        )
        waited = time.monotonic() - start
        if not phases or phases[-1] != phase:
            phases.append(phase)
        if progress is not None:
            progress(phase, waited, detail)
        if phase in ("ready", "no-health-endpoint"):
            return Readiness(True, phase, waited, detail, tuple(phases))
        if time.monotonic() + interval >= deadline:
            return Readiness(False, phase, waited, detail, tuple(phases))
        time.sleep(interval)
