"""The budget: what context and output the server serves, as numbers, and whether a client configured with
Kimi-K2.5's published context gets answers at all.

Clients size ``max_completion_tokens`` from the context they are configured with (kimi-cli's ``kimi`` provider: the
context - its prompt estimate - 1,024). SGLang 0.5.23 refuses ``max_completion_tokens`` above the served context
(``serving_chat.py``: "max_completion_tokens is too large: N. This model supports at most C completion tokens"), so a
client configured with the published 262,144 against a server started with ``--context-length 131072`` gets HTTP 400
on every request. The numbers come from ``GET /v1/models`` (``max_model_len``, what any client key may read) and
``GET /server_info`` (``context_length``, ``allow_auto_truncate``) when it answers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, ClassVar

from kimi_serve.core.findings import Finding
from kimi_serve.core.http import TransportError, request
from kimi_serve.verify import http_findings as hx
from kimi_serve.verify import wire
from kimi_serve.verify.agent_rules import PUBLISHED_CONTEXT
from kimi_serve.verify.discovery import fetch_json
from kimi_serve.verify.report import ProbeResult, clip, warning
from kimi_serve.verify.target import Target

NAME, MODE = "budget", "non-stream"
PROMPT_ESTIMATE = 64  # the probe's prompt, rendered, stays under this
RESERVE = 1024  # what kimi-cli keeps back
SIZED = PUBLISHED_CONTEXT - PROMPT_ESTIMATE - RESERVE
CLIENTS = "kimi-cli's `kimi` provider and every client configured with K2.5's published context"


@dataclass
class Budget:
    JSON_PROPERTIES: ClassVar[tuple[Any, ...]] = (("published_context", lambda _: PUBLISHED_CONTEXT),)

    context_length: int | None = None  # the served context, tokens
    source: str = ""  # where it was read
    max_output_tokens: int | None = None  # the largest max_completion_tokens the server accepts
    sized_request: int = SIZED  # the max_completion_tokens verify sent
    accepted: bool | None = None  # None: no answer
    status: int | None = None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def served_limits(models: Any, info: Any, model: str) -> Budget:
    """The numbers from ``/v1/models`` (the probed model's ``max_model_len``) and ``/server_info``."""
    budget = Budget()
    entries = models.get("data") if isinstance(models, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("id") == model and _int(entry.get("max_model_len")):
            budget.context_length, budget.source = entry["max_model_len"], "/v1/models max_model_len"
    info = info if isinstance(info, dict) else {}
    if budget.context_length is None and _int(info.get("context_length")):
        budget.context_length, budget.source = info["context_length"], "/server_info context_length"
    if budget.context_length is not None and info.get("allow_auto_truncate") is not True:
        budget.max_output_tokens = budget.context_length  # SGLang's rule: max_completion_tokens <= the context
    return budget


def judge_sized(budget: Budget, status: int | None, body: str) -> list[Finding]:
    """A warning when the request sized for the published context was refused (a 4xx other than auth and model), or,
    when it was not sent (``status`` None), when the served output limit is below it (SGLang refuses it then)."""
    if status is None:
        if budget.max_output_tokens is None or budget.max_output_tokens >= budget.sized_request:
            return []
        limit = budget.max_output_tokens
        what = f"would get HTTP 400 (SGLang refuses max_completion_tokens above the served {limit:,})"
    elif not 400 <= status < 500 or status in (401, 404):
        return []
    else:
        what = f"got HTTP {status}: {clip(body)}"
    served = f"{budget.context_length:,} tokens" if budget.context_length else "the server's context length"
    return [
        warning(
            "context_budget",
            f"a request sized for K2.5's published {PUBLISHED_CONTEXT:,}-token context (max_completion_tokens "
            f"{budget.sized_request:,}: the context - the prompt - 1,024, as kimi-cli sizes it) {what}; {CLIENTS} "
            "get this on every request",
            f"configure clients with the served context, {served} (GET /v1/models max_model_len), not "
            f"{PUBLISHED_CONTEXT:,}; or serve a longer context (--context-length; profile: model.context_length) "
            "where memory allows",
        )
    ]


def check_budget(
    target: Target, model: str, api_key: str | None, deadline: float, timeout: float, *, send: bool = True
) -> tuple[Budget, ProbeResult]:
    """The served limits and the sized request's fate: (numbers for the report, the ``budget`` probe's result).
    ``send`` False (a run with --max-tokens: monitoring keeps every request small): the numbers alone judge."""
    start = time.monotonic()
    models, info = (fetch_json(target, path, deadline, api_key) for path in ("/v1/models", "/server_info"))
    budget = served_limits(models, info, model)
    if not send:
        found = tuple(judge_sized(budget, None, ""))
        return budget, ProbeResult(NAME, MODE, time.monotonic() - start, warnings=found, detail=_detail(budget))
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "What is the capital of France? Answer with one word."}],
        "max_completion_tokens": SIZED,
        "chat_template_kwargs": {"thinking": False},
        "temperature": 0.6,
        "stream": False,
    }
    try:
        reply = request("POST", target.url("/v1/chat/completions"), deadline=deadline, api_key=api_key, json_body=body)
    except TransportError as err:
        finding = hx.transport_finding(err, timeout=timeout)
        return budget, ProbeResult(NAME, MODE, time.monotonic() - start, (finding,), unreachable=hx.unreachable(err))
    latency = time.monotonic() - start
    budget.status = reply.status
    text = _error_message(reply.body)
    warnings = judge_sized(budget, reply.status, text)
    if warnings:
        budget.accepted = False
        return budget, ProbeResult(NAME, MODE, latency, warnings=tuple(warnings), detail=_detail(budget))
    failure = hx.http_finding(reply, api_key_sent=bool(api_key), model=model)
    if failure is None:
        _, failure = hx.parse_json_body(reply)
    if failure is not None:
        return budget, ProbeResult(NAME, MODE, latency, (failure,))
    budget.accepted = True
    return budget, ProbeResult(NAME, MODE, latency, detail=_detail(budget))


def _error_message(body: bytes) -> str:
    """An error body's ``message`` (SGLang's error shape), else the body as text."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        message = wire.loads(text).get("message")
    except (ValueError, AttributeError):
        return text
    return message if isinstance(message, str) else text


def _detail(budget: Budget) -> str:
    served = f"served context {budget.context_length:,} tokens ({budget.source})" if budget.context_length else ""
    fate = {True: "accepted", False: "refused", None: "not sent (--max-tokens)"}[budget.accepted]
    return "; ".join(x for x in (served, f"max_completion_tokens {budget.sized_request:,} {fate}") if x)
