"""What the server says about itself before any probe: the models it serves (``/v1/models``) and the parsers it
reports (``/model_info``, used to sharpen diagnoses)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from kimi_serve.core.findings import Finding
from kimi_serve.core.http import TransportError, request
from kimi_serve.verify import http_findings as hx
from kimi_serve.verify import wire
from kimi_serve.verify.report import problem
from kimi_serve.verify.target import Target


@dataclass(frozen=True)
class Posted:
    data: Any
    latency_s: float
    failure: Finding | None = None
    unreachable: bool = False


def post(
    target: Any, path: str, body: dict[str, Any] | None, *, api_key: str | None, deadline: float, timeout: float
) -> Posted:
    """POST ``body`` as JSON (None: GET ``path``) and read a JSON answer (a finding when there is none)."""
    method = "GET" if body is None else "POST"
    start = time.monotonic()
    try:
        reply = request(method, target.url(path), deadline=deadline, api_key=api_key, json_body=body)
    except TransportError as err:
        lost = hx.transport_finding(err, timeout=timeout)
        return Posted(None, time.monotonic() - start, lost, unreachable=hx.unreachable(err))
    latency = time.monotonic() - start
    if reply.status == 404 and path == "/generate":
        return Posted(
            None,
            latency,
            problem(
                "generate_missing",
                "POST /generate answered 404: the server has no native generate endpoint",
                "point --host at SGLang itself (not an OpenAI-only proxy); the raw path needs SGLang's /generate",
            ),
        )
    failure = hx.http_finding(reply, api_key_sent=bool(api_key), model=(body or {}).get("model"))
    if failure is None:
        data, failure = hx.parse_json_body(reply)
        if failure is None or body is not None:
            return Posted(data, latency, failure)
    return Posted(None, latency, problem(failure.code, f"{method} {path}: {failure.message}", failure.fix))


def get_json(
    target: Target, path: str, deadline: float, api_key: str | None, timeout: float
) -> tuple[Any, Finding | None, bool]:
    """(json, finding, unreachable) for a GET."""
    got = post(target, path, None, api_key=api_key, deadline=deadline, timeout=timeout)
    return got.data, got.failure, got.unreachable


def served_models(data: Any) -> list[str]:
    entries = data.get("data") if isinstance(data, dict) else None
    return (
        [e["id"] for e in entries if isinstance(e, dict) and isinstance(e.get("id"), str)]
        if isinstance(entries, list)
        else []
    )


def server_info(target: Target, deadline: float, api_key: str | None) -> dict[str, Any]:
    """The parsers SGLang reports in /model_info (used to sharpen diagnoses); empty when it does not say."""
    data, failure, _ = get_json(target, "/model_info", deadline, api_key, 0.0)
    if failure or not isinstance(data, dict):
        return {}
    return {k: data.get(k) for k in ("tool_call_parser", "reasoning_parser") if k in data}


def fetch(target: Target, path: str, deadline: float, api_key: str | None) -> bytes | None:
    """The body of a GET answered 200 within the deadline and read limits; None for anything else (nothing judged)."""
    try:
        reply = request("GET", target.url(path), deadline=deadline, api_key=api_key)
    except TransportError:
        return None
    return reply.body if reply.status == 200 and not reply.timed_out and not reply.limit else None


def fetch_json(target: Target, path: str, deadline: float, api_key: str | None) -> Any:
    """:func:`fetch`'s body decoded (:func:`~kimi_serve.verify.wire.loads`); None when there is none or no JSON."""
    body = fetch(target, path, deadline, api_key)
    try:
        return None if body is None else wire.loads(body)
    except ValueError:
        return None
