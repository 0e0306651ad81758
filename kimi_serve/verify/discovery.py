"""What the server says about itself before any probe: the models it serves (``/v1/models``) and the parsers it
reports (``/model_info``, used to sharpen diagnoses)."""

from __future__ import annotations

from typing import Any

from kimi_serve.core.findings import Finding
from kimi_serve.core.http import TransportError, request
from kimi_serve.verify import http_findings as hx
from kimi_serve.verify import wire
from kimi_serve.verify.report import problem
from kimi_serve.verify.target import Target


def get_json(
    target: Target, path: str, deadline: float, api_key: str | None, timeout: float
) -> tuple[Any, Finding | None, bool]:
    """(json, finding, unreachable) for a GET."""
    try:
        reply = request("GET", target.url(path), deadline=deadline, api_key=api_key)
    except TransportError as err:
        return None, hx.transport_finding(err, timeout=timeout), hx.unreachable(err)
    failure = hx.http_finding(reply, api_key_sent=bool(api_key), model=None)
    if failure:
        return None, problem(failure.code, f"GET {path}: {failure.message}", failure.fix), False
    data, failure = hx.parse_json_body(reply)
    if failure:
        failure = problem(failure.code, f"GET {path}: {failure.message}", failure.fix)
    return data, failure, False


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
