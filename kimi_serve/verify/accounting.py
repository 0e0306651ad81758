"""Token accounting the clients rely on (docs/verify.md "Token accounting"): one thinking answer whose ``usage`` must
be there, whose ``reasoning_tokens`` fit inside ``completion_tokens`` (SGLang can report more under speculative
decoding, sgl-project/sglang#39826), and whose ``prompt_tokens`` equal the prompt ids the server itself returns
(``return_input_ids_in_sglext``; not judged where the server returns none). Each violation names the clients that
bill or budget by that number."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from kimi_serve.core.findings import Finding
from kimi_serve.verify.answer import as_object, json_int
from kimi_serve.verify.discovery import post
from kimi_serve.verify.probes import NON_STREAM, Probe
from kimi_serve.verify.report import ProbeResult, problem

ACCOUNTING = "accounting"
# who reads each number (docs/clients.md): what goes wrong for them when it is missing or wrong
USAGE_CLIENTS = (
    "opencode and kimi-cli size the context and compact by it, pydantic-ai's UsageLimits and openai-agents' Usage "
    "budget runs by it, LangChain's usage_metadata and the AI SDK's usage feed billing"
)
REASONING_CLIENTS = (
    "pydantic-ai, LangChain (output_token_details.reasoning) and opencode bill reasoning as part of the output; "
    "visible output = completion - reasoning goes negative"
)
PROMPT_CLIENTS = (
    "opencode and kimi-cli decide when to compact from prompt_tokens; every client billing input tokens "
    "(LangChain, the AI SDK, pydantic-ai) charges the wrong amount"
)
PROBE = Probe(
    ACCOUNTING,
    [{"role": "user", "content": "What is 17 * 23? Think it through, then give the number."}],
    lambda _a, _s: [],
    modes=(NON_STREAM,),
)


def usage_findings(data: Any) -> list[Finding]:
    """The accounting faults of one chat completion (its ``usage`` and ``sglext.input_ids``)."""
    usage = as_object(as_object(data).get("usage"))
    prompt, completion = json_int(usage.get("prompt_tokens")), json_int(usage.get("completion_tokens"))
    if prompt is None or completion is None:
        return [
            problem(
                "usage_missing",
                "the answer has no usage with integer prompt_tokens and completion_tokens: "
                + USAGE_CLIENTS
                + " (they count 0 or fail)",
                "point --host at SGLang itself (a proxy that strips usage breaks them)",
            )
        ]
    found = []
    details = as_object(usage.get("completion_tokens_details"))
    reasoning = json_int(details.get("reasoning_tokens"))
    reasoning = reasoning if reasoning is not None else json_int(usage.get("reasoning_tokens"))
    if reasoning is not None and reasoning > completion:
        found.append(
            problem(
                "reasoning_tokens_over",
                f"usage reports reasoning_tokens {reasoning} above completion_tokens {completion}: "
                + REASONING_CLIENTS,
                "a known SGLang fault under speculative decoding (sgl-project/sglang#39826): rerun without "
                "speculative decoding to confirm, and count reasoning from reasoning_content until it is fixed",
            )
        )
    ids = as_object(data).get("sglext")
    input_ids = as_object(ids).get("input_ids") if isinstance(ids, dict) else None
    if isinstance(input_ids, list) and input_ids and len(input_ids) != prompt:
        found.append(
            problem(
                "prompt_tokens_mismatch",
                f"usage.prompt_tokens is {prompt}, but the server's own prompt ids (sglext.input_ids) are "
                f"{len(input_ids)}: " + PROMPT_CLIENTS,
                "read the SGLang log; a gateway rewriting usage must pass SGLang's numbers through",
            )
        )
    total = json_int(usage.get("total_tokens"))
    if total is not None and total != prompt + completion:
        found.append(
            problem(
                "total_tokens_mismatch",
                f"usage.total_tokens {total} is not prompt_tokens {prompt} + completion_tokens {completion}: "
                + USAGE_CLIENTS,
                "point --host at SGLang itself",
            )
        )
    return found


def run_accounting_probe(
    target: Any, *, model: str, api_key: str | None, deadline: float, timeout: float, max_tokens: int | None = None
) -> ProbeResult:
    """``max_tokens``: verify's cap on every probe (--max-tokens), None: the probe's own."""
    start = time.monotonic()
    probe = PROBE if max_tokens is None else dataclasses.replace(PROBE, max_tokens=min(PROBE.max_tokens, max_tokens))
    body = {**probe.body(model, False), "return_input_ids_in_sglext": True}
    posted = post(target, "/v1/chat/completions", body, api_key=api_key, deadline=deadline, timeout=timeout)
    latency = time.monotonic() - start
    if posted.failure is not None:
        return ProbeResult(ACCOUNTING, NON_STREAM, latency, (posted.failure,), unreachable=posted.unreachable)
    findings = usage_findings(posted.data)
    usage = as_object(as_object(posted.data).get("usage"))
    detail = f"prompt {usage.get('prompt_tokens')}, completion {usage.get('completion_tokens')}" if not findings else ""
    return ProbeResult(ACCOUNTING, NON_STREAM, latency, tuple(findings), detail=detail)
