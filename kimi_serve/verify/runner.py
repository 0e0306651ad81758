"""Run a verify suite: readiness, model discovery, then every probe x mode concurrently under one deadline."""

from __future__ import annotations

import dataclasses
import json
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import Any

from kimi_serve.core.findings import Finding
from kimi_serve.core.http import LIMITS, Limits, TransportError, read_limits, request
from kimi_serve.core.suites import QUICK
from kimi_serve.verify import diagnose as dx
from kimi_serve.verify.answer import Answer, answer_from_json
from kimi_serve.verify.leaks import server_info_leaks
from kimi_serve.verify.probes import STREAM, Probe
from kimi_serve.verify.probes import suite as suite_probes
from kimi_serve.verify.raw_suite import raw_calls
from kimi_serve.verify.readiness import POLL_TIMEOUT, Progress, wait_ready
from kimi_serve.verify.report import ProbeResult, VerifyReport, problem
from kimi_serve.verify.stream import answer_from_sse, stall_limit
from kimi_serve.verify.target import Target, parse_target

DEFAULT_TIMEOUT = 180.0
# How long a contract check after a start (`up`, `check --contract`) waits for /health: the same in both, so the dry
# run predicts `up`.
AFTER_START_WAIT = 30.0
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
    }
)
_GRACE = 2.0  # each request ends by the deadline on its own; this only bounds the join
_COMPLETE_DESPITE = frozenset({"stream_no_finish_reason", "stream_tool_index"})  # wire faults that leave the text whole


@dataclass
class _Outcome:
    answer: Answer | None
    latency_s: float
    failure: Finding | None = None
    unreachable: bool = False
    model_404: bool = False
    attempts: int = 1


def _get_json(
    target: Target, path: str, deadline: float, api_key: str | None, timeout: float
) -> tuple[Any, Finding | None, bool]:
    """(json, finding, unreachable) for a GET."""
    try:
        reply = request("GET", target.url(path), deadline=deadline, api_key=api_key)
    except TransportError as err:
        return None, dx.transport_finding(err, timeout=timeout), err.kind != "timeout"
    failure = dx.http_finding(reply, api_key_sent=bool(api_key), model=None)
    if failure:
        return None, problem(failure.code, f"GET {path}: {failure.message}", failure.fix), False
    data, failure = dx.parse_json_body(reply)
    if failure:
        failure = problem(failure.code, f"GET {path}: {failure.message}", failure.fix)
    return data, failure, False


def _served_models(data: Any) -> list[str]:
    entries = data.get("data") if isinstance(data, dict) else None
    return (
        [e["id"] for e in entries if isinstance(e, dict) and isinstance(e.get("id"), str)]
        if isinstance(entries, list)
        else []
    )


def _server_info(target: Target, deadline: float, api_key: str | None) -> dict[str, Any]:
    """The parsers SGLang reports in /model_info (used to sharpen diagnoses); empty when it does not say."""
    data, failure, _ = _get_json(target, "/model_info", deadline, api_key, 0.0)
    if failure or not isinstance(data, dict):
        return {}
    return {k: data.get(k) for k in ("tool_call_parser", "reasoning_parser") if k in data}


def _call(
    target: Target, probe: Probe, mode: str, model: str, api_key: str | None, deadline: float, timeout: float
) -> _Outcome:
    stream = mode == STREAM
    start = time.monotonic()
    try:
        reply = request(
            "POST",
            target.url("/v1/chat/completions"),
            deadline=deadline,
            api_key=api_key,
            json_body=probe.body(model, stream),
            stall_s=stall_limit(timeout) if stream else None,
        )
    except TransportError as err:
        return _Outcome(
            None,
            time.monotonic() - start,
            dx.transport_finding(err, timeout=timeout),
            unreachable=err.kind != "timeout",
        )
    latency = time.monotonic() - start
    failure = dx.http_finding(reply, api_key_sent=bool(api_key), model=model)
    if failure:
        return _Outcome(None, latency, failure, model_404=failure.code == "http_404_model")
    if stream and "json" in reply.content_type and not reply.timed_out and not reply.limit:
        data, failure = dx.parse_json_body(reply)
        if failure is None and isinstance(data, dict) and data.get("error"):
            return _Outcome(
                None,
                latency,
                problem(
                    "stream_error",
                    f"error instead of a stream: {dx.clip(json.dumps(data['error']))}",
                    "read the SGLang log",
                ),
            )
    if stream:
        return _Outcome(
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
    data, failure = dx.parse_json_body(reply)
    if failure:
        return _Outcome(None, latency, failure)
    return _Outcome(answer_from_json(data), latency)


def _attempt(
    target: Target, probe: Probe, mode: str, model: str, api_key: str | None, deadline: float, timeout: float
) -> _Outcome:
    """One call, and a second one when the first answer failed only in ways a sampling model can."""
    first = _call(target, probe, mode, model, api_key, deadline, timeout)
    if first.answer is None or first.answer.problems:
        return first
    codes = {f.code for f in probe.check(first.answer, {})}
    if not codes or not codes <= MODEL_NOISE or time.monotonic() >= deadline:
        return first
    second = _call(target, probe, mode, model, api_key, deadline, timeout)
    second.latency_s += first.latency_s
    second.attempts = 2
    return second


def judge(probe: Probe, answer: Answer, server: dict[str, Any]) -> tuple[tuple[Finding, ...], tuple[Finding, ...]]:
    """(failures, warnings) for one answer: its wire problems, then the probe's rules when the answer arrived whole."""
    findings = list(answer.problems)
    if {f.code for f in findings} <= _COMPLETE_DESPITE:  # judge the content only when the answer arrived whole
        findings += probe.check(answer, server)
    return tuple(dict.fromkeys(findings)), tuple(dict.fromkeys(answer.warnings))


def _result(probe: Probe, mode: str, outcome: _Outcome, server: dict[str, Any]) -> ProbeResult:
    if outcome.failure is not None or outcome.answer is None:
        failure = outcome.failure or problem("no_answer", "no answer", "read the server log")
        return ProbeResult(
            probe.name, mode, outcome.latency_s, (failure,), unreachable=outcome.unreachable, attempts=outcome.attempts
        )
    failures, warnings = judge(probe, outcome.answer, server)
    return ProbeResult(probe.name, mode, outcome.latency_s, failures, attempts=outcome.attempts, warnings=warnings)


def _name_key_source(finding: Finding, source: str) -> Finding:
    """A 401 says which key was sent (its source, never the key): a stale one is the usual cause."""
    if finding.code != "http_401" or source == "none":
        return finding
    return problem(finding.code, f"{finding.message} (key from {source})", finding.fix)


def run_verify(
    target: Target | str,
    *,
    api_key: str | None = None,
    model: str | None = None,
    wait: float = 0.0,
    timeout: float = DEFAULT_TIMEOUT,
    suite: str = QUICK,
    progress: Progress | None = None,
    key_source: str | None = None,
    max_tokens: int | None = None,
    expected_ports: tuple[int, ...] = (),
    limits: Limits = LIMITS,
) -> VerifyReport:
    """Check that the server at ``target`` keeps the Kimi API contract; never prints, never raises for server faults.

    ``wait``: seconds to wait for readiness (0 = check once). ``timeout``: the limit for everything after readiness.
    ``progress`` receives readiness phases. ``key_source`` names where ``api_key`` came from, for the report
    (:attr:`kimi_serve.verify.target.ApiKey.source`; default "caller" when a key is given, else "none").
    ``max_tokens`` caps every probe's max_tokens (monitoring keeps runs light). After the probes come the
    least-privilege checks (admin endpoints, stray listeners; ``expected_ports``: listeners beyond loopback besides
    the API port that are fine). ``limits``: what verify reads at most (transport.Limits). The report's
    ``exit_code`` is 0 (holds), 1 (violated) or 3 (unreachable).
    """
    target = parse_target(target) if isinstance(target, str) else target
    with read_limits(limits):  # what the whole run may read
        return _run(target, api_key, model, wait, timeout, suite, progress, key_source, max_tokens, expected_ports)


def _run(
    target: Target,
    api_key: str | None,
    model: str | None,
    wait: float,
    timeout: float,
    suite: str,
    progress: Progress | None,
    key_source: str | None,
    max_tokens: int | None,
    expected_ports: tuple[int, ...],
) -> VerifyReport:
    probes = suite_probes(suite)
    if max_tokens is not None:
        probes = tuple(dataclasses.replace(p, max_tokens=min(p.max_tokens, max_tokens)) for p in probes)
    started = time.monotonic()
    readiness = wait_ready(target, started + wait, progress, api_key=api_key, poll_timeout=min(POLL_TIMEOUT, timeout))
    report = VerifyReport(
        target=target.base_url,
        suite=suite,
        readiness=readiness,
        model=model,
        key_source=key_source or ("caller" if api_key else "none"),
    )
    if not readiness.ready:
        fix = (
            "start the server, or pass --wait SECONDS to wait while it loads"
            if wait <= 0
            else "raise --wait (a cold start loads ~600 GB and captures CUDA graphs) or read the server log"
        )
        report.error = problem(
            "not_ready", f"server not ready after {readiness.waited_s:.1f}s: {readiness.detail}", fix
        )
        report.error_unreachable = True
        report.elapsed_s = time.monotonic() - started
        return report
    deadline = time.monotonic() + timeout
    served: list[str] | None = None
    calls = [(p, m) for p in probes for m in p.modes]
    with ThreadPoolExecutor(max_workers=len(calls) + 5, thread_name_prefix="verify") as pool:
        info_future = pool.submit(_server_info, target, deadline, api_key)
        leak_future = pool.submit(server_info_leaks, target, deadline, api_key)
        if model is None:
            data, failure, unreachable = _get_json(target, "/v1/models", deadline, api_key, timeout)
            served = _served_models(data) if failure is None else None
            if failure is None and not served:
                failure = problem(
                    "no_models", f"GET /v1/models lists no model: {dx.clip(json.dumps(data))}", "pass --model NAME"
                )
            if failure is not None or not served:
                report.error = _name_key_source(failure, report.key_source) if failure else failure
                report.error_unreachable = unreachable
                info_future.cancel()
                leak_future.cancel()
                report.elapsed_s = time.monotonic() - started
                return report
            model = served[0]
        report.model = model
        futures: list[Future[_Outcome]] = [
            pool.submit(_attempt, target, p, m, model, api_key, deadline, timeout) for p, m in calls
        ]
        extras = raw_calls(suite, target, model=model, api_key=api_key, deadline=deadline, timeout=timeout)
        extra_futures = [pool.submit(fn) for _, _, fn in extras]
        pending: list[Future[Any]] = [*futures, *extra_futures, info_future, leak_future]
        wait_futures(pending, timeout=max(0.0, deadline - time.monotonic()) + _GRACE)
        server = info_future.result() if info_future.done() else {}
        leaks = leak_future.result() if leak_future.done() else []
        report.server = server
        for (probe, mode), future in zip(calls, futures, strict=True):
            outcome = (
                future.result()
                if future.done()
                else _Outcome(
                    None, timeout, problem("timeout", f"no answer within --timeout {timeout:g}s", "read the server log")
                )
            )
            if outcome.failure is not None:
                outcome.failure = _name_key_source(outcome.failure, report.key_source)
            result = _result(probe, mode, outcome, server)
            if outcome.model_404:
                if served is None:
                    data, _, _ = _get_json(target, "/v1/models", time.monotonic() + POLL_TIMEOUT, api_key, POLL_TIMEOUT)
                    served = _served_models(data)
                result = ProbeResult(
                    probe.name, mode, result.latency_s, (dx.model_not_found(model, served),), attempts=result.attempts
                )
            report.probes.append(result)
        for (probe, mode, _), extra in zip(extras, extra_futures, strict=True):
            report.probes.append(
                extra.result()
                if extra.done()
                else ProbeResult(
                    probe.name,
                    mode,
                    timeout,
                    (problem("timeout", f"no answer within --timeout {timeout:g}s", "read the server log"),),
                )
            )
    from kimi_serve.verify.parser_faults import parser_checks
    from kimi_serve.verify.privilege import privilege_checks

    tail = max(deadline, time.monotonic() + POLL_TIMEOUT)  # one end for every check after the probes
    report.checks, report.listeners = privilege_checks(target, api_key, tail, expected_ports)
    report.checks += parser_checks(target, api_key, tail)
    report.checks += leaks  # a key handed to clients: a least-privilege FAIL (verify/leaks.py)
    report.elapsed_s = time.monotonic() - started
    return report
