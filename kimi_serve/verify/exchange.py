"""One probe against the server: its request (streamed or not), the tool loop's second turn, one more try when the
answer failed only in ways a sampling model can, and the verdict on the answer (:func:`judge`). The run that
schedules every probe under one deadline is :mod:`kimi_serve.verify.runner`."""

from __future__ import annotations

import dataclasses
import json
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from kimi_serve.core.findings import WARN, Finding
from kimi_serve.core.http import TransportError, request
from kimi_serve.verify import http_findings as hx
from kimi_serve.verify.agentic import REPLAYS
from kimi_serve.verify.answer import Answer, answer_from_json
from kimi_serve.verify.draft import SPEC_DETAILS
from kimi_serve.verify.probes import STREAM, Probe
from kimi_serve.verify.report import ProbeResult, clip, problem
from kimi_serve.verify.stream import answer_from_sse, stall_limit
from kimi_serve.verify.target import Target

# Findings a sampling model can produce on a healthy server (it answered in text, made one call instead of two,
# drifted from the schema, miscounted): such a probe gets one more try, as Moonshot's vendor verifier reruns them.
MODEL_NOISE = frozenset(
    {
        "no_tool_call",
        "parallel_calls",
        "arguments_schema",
        "argument_small",
        "argument_corrupt",
        "unexpected_tool_call",
        "length",
        "strict_call_dropped",
    }
)
_COMPLETE_DESPITE = frozenset({"stream_no_finish_reason", "stream_tool_index"})  # wire faults that leave the text whole


@dataclass
class ProbeOutcome:
    """One probe's exchange as it came back: the answer (None: ``failure`` says why), its latency, how many tries."""

    answer: Answer | None
    latency_s: float
    failure: Finding | None = None
    unreachable: bool = False
    model_404: bool = False
    attempts: int = 1
    judged_by: Probe | None = None  # the follow-up turn whose answer this is (a tool loop), else the probe itself


def call(
    target: Target, probe: Probe, mode: str, model: str, api_key: str | None, deadline: float, timeout: float
) -> ProbeOutcome:
    stream = mode == STREAM
    start = time.monotonic()
    try:
        reply = request(
            "POST",
            target.url("/v1/chat/completions"),
            deadline=deadline,
            api_key=api_key,
            # not streamed: SGLang's acceptance for this answer in sglext (verify/draft.py); streamed, it would add a
            # chunk without choices, which the stream rules judge
            json_body=probe.body(model, stream) if stream else {**probe.body(model, stream), **SPEC_DETAILS},
            stall_s=stall_limit(timeout) if stream else None,
        )
    except TransportError as err:
        lost = hx.transport_finding(err, timeout=timeout)
        return ProbeOutcome(None, time.monotonic() - start, lost, unreachable=hx.unreachable(err))
    latency = time.monotonic() - start
    failure = hx.http_finding(reply, api_key_sent=bool(api_key), model=model)
    if failure:
        return ProbeOutcome(None, latency, failure, model_404=failure.code == "http_404_model")
    if stream and "json" in reply.content_type and not reply.timed_out and not reply.limit:
        data, failure = hx.parse_json_body(reply)
        if failure is None and isinstance(data, dict) and data.get("error"):
            error = f"error instead of a stream: {clip(json.dumps(data['error']))}"
            return ProbeOutcome(None, latency, problem("stream_error", error, "read the SGLang log"))
    if stream:
        return ProbeOutcome(
            answer_from_sse(
                reply.body,
                timed_out=reply.timed_out,
                cut=reply.cut,
                stalled=reply.stalled,
                idle_s=reply.idle_s,
                stall_s=stall_limit(timeout),
                limit=reply.limit,
                deadline=deadline,
            ),
            latency,
        )
    data, failure = hx.parse_json_body(reply)
    if failure:
        return ProbeOutcome(None, latency, failure)
    return ProbeOutcome(answer_from_json(data), latency)


def exchange(
    target: Target, probe: Probe, mode: str, model: str, api_key: str | None, deadline: float, timeout: float
) -> ProbeOutcome:
    """One call; for a tool loop (``probe.follow_up``) the second turn too, built from the first answer."""
    first = call(target, probe, mode, model, api_key, deadline, timeout)
    if probe.follow_up is None or first.answer is None or first.answer.problems:
        return first
    if any(f.status != WARN for f in probe.check(first.answer, {})):
        return first  # an agent stops here too: the first turn's rules say why
    follow = probe.follow_up(first.answer)
    if follow is None:
        return first
    follow = dataclasses.replace(follow, modes=probe.modes, max_tokens=probe.max_tokens)
    second = call(target, follow, mode, model, api_key, deadline, timeout)
    second.latency_s += first.latency_s
    second.judged_by = follow
    if second.failure is not None:
        how = f" ({REPLAYS[probe.name].label})" if probe.name in REPLAYS else ""
        failure = second.failure
        second.failure = problem(failure.code, f"follow-up turn{how}: {failure.message}", failure.fix)
    return second


def attempt(
    target: Target, probe: Probe, mode: str, model: str, api_key: str | None, deadline: float, timeout: float
) -> ProbeOutcome:
    """One exchange, and a second one when the first answer failed only in ways a sampling model can."""
    first = exchange(target, probe, mode, model, api_key, deadline, timeout)
    if first.answer is None or first.answer.problems:
        return first
    codes = {f.code for f in (first.judged_by or probe).check(first.answer, {}) if f.status != WARN}
    if not codes or not codes <= MODEL_NOISE or time.monotonic() >= deadline:
        return first
    second = exchange(target, probe, mode, model, api_key, deadline, timeout)
    second.latency_s += first.latency_s
    second.attempts = 2
    return second


def judge(probe: Probe, answer: Answer, server: dict[str, Any]) -> tuple[tuple[Finding, ...], tuple[Finding, ...]]:
    """(failures, warnings) for one answer: its wire problems, then the probe's rules when the answer arrived whole."""
    findings, warnings = list(answer.problems), list(answer.warnings)
    if {f.code for f in findings} <= _COMPLETE_DESPITE:  # judge the content only when the answer arrived whole
        for f in probe.check(answer, server):
            (warnings if f.status == WARN else findings).append(f)
    return tuple(dict.fromkeys(findings)), tuple(dict.fromkeys(warnings))


def result_of(probe: Probe, mode: str, outcome: ProbeOutcome, server: dict[str, Any]) -> ProbeResult:
    if outcome.failure is not None or outcome.answer is None:
        failure = outcome.failure or problem("no_answer", "no answer", "read the server log")
        return ProbeResult(
            probe.name, mode, outcome.latency_s, (failure,), unreachable=outcome.unreachable, attempts=outcome.attempts
        )
    failures, warnings = judge(outcome.judged_by or probe, outcome.answer, server)
    return ProbeResult(probe.name, mode, outcome.latency_s, failures, attempts=outcome.attempts, warnings=warnings)


def no_answer(timeout: float, fix: str = "read the server log") -> Finding:
    return problem("timeout", f"no answer within --timeout {timeout:g}s", fix)


def outcome_of(future: Future[ProbeOutcome], timeout: float) -> ProbeOutcome:
    return future.result() if future.done() else ProbeOutcome(None, timeout, no_answer(timeout))
