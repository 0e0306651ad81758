"""Run a verify suite: readiness, model discovery, then every probe x mode under one deadline, at most CONNECTIONS
requests at once (the load probe's streams on top)."""

from __future__ import annotations

import dataclasses
import json
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any

from kimi_serve.core.findings import Finding
from kimi_serve.core.http import read_limits
from kimi_serve.core.suites import FULL, RAW
from kimi_serve.verify import http_findings as hx
from kimi_serve.verify import load as load_probe
from kimi_serve.verify.agent_rules import honoured
from kimi_serve.verify.agentic import DIALECT_PROBES, agentic_probes
from kimi_serve.verify.budget import check_budget
from kimi_serve.verify.discovery import get_json, served_models, server_info
from kimi_serve.verify.draft import judge_draft
from kimi_serve.verify.exchange import ProbeOutcome, attempt, no_answer, outcome_of, result_of
from kimi_serve.verify.family_probe import family_calls, for_family, resolve_family
from kimi_serve.verify.leaks import server_info_leaks
from kimi_serve.verify.options import VerifyOptions
from kimi_serve.verify.probes import STREAM
from kimi_serve.verify.probes import suite as suite_probes
from kimi_serve.verify.raw_suite import raw_calls
from kimi_serve.verify.readiness import POLL_TIMEOUT, address, wait_ready
from kimi_serve.verify.report import ProbeResult, VerifyReport, clip, problem
from kimi_serve.verify.target import Target, parse_target

# How long a contract check after a start (`up`, `check --contract`) waits for /health: the same in both, so the dry
# run predicts `up`.
AFTER_START_WAIT = 30.0
_GRACE = 2.0  # each request ends by the deadline on its own; this only bounds the join
# verify's own requests at once (probes, discovery, checks; the load probe's --concurrency streams come on top): the
# full suite has ~26 to send, and a server or gateway with a small accept backlog resets some when all come at once.
# Each probe reads and judges its answer inside its slot, so at most this many answers are decoded at a time.
CONNECTIONS = 8


def _after(first: Future[ProbeOutcome] | None, deadline: float, fn: Any, *args: Any) -> ProbeOutcome:
    """``fn(*args)`` once ``first`` is done (or the deadline is near)."""
    if first is not None:
        wait_futures([first], timeout=max(0.0, deadline - time.monotonic()))
    result: ProbeOutcome = fn(*args)
    return result


def _dialects(results: list[ProbeResult]) -> dict[str, str]:
    """Which thinking-off dialect the server honours, from the probes that tried each (all their modes)."""
    out = {}
    for dialect, name in DIALECT_PROBES.items():
        tried = [f for p in results if p.probe == name for f in (*p.findings, *p.warnings)]
        if any(p.probe == name for p in results):
            out[dialect] = honoured(tuple(tried))
    return out


def _name_key_source(finding: Finding, source: str) -> Finding:
    """A 401 says which key was sent (its source, never the key): a stale one is the usual cause."""
    if finding.code != "http_401" or source == "none":
        return finding
    return problem(finding.code, f"{finding.message} (key from {source})", finding.fix)


def _parser_checks(found: list[Finding], report: VerifyReport) -> list[Finding]:
    """The server's kimi_k2 parser's faults, unless the server runs without that parser (it says so in /model_info,
    or its answers carry raw tool-call markup): then its answers never reach it and the patch advice cannot apply."""
    from kimi_serve.verify.causes import TOOL_PARSER_FLAG, missing_parsers
    from kimi_serve.verify.parser_faults import unused

    reported = report.server.get("tool_call_parser")
    failures = [p.findings for p in report.probes if not p.passed]
    if ("tool_call_parser" in report.server and reported != "kimi_k2") or TOOL_PARSER_FLAG in missing_parsers(
        failures, report.server
    ):
        return unused(found, reported)
    return found


def run_verify(target: Target | str, options: VerifyOptions | None = None, **changes: Any) -> VerifyReport:
    """Check that the server at ``target`` keeps the Kimi API contract; never prints, never raises for server faults.

    ``options`` (:class:`~kimi_serve.verify.options.VerifyOptions`) with ``changes`` to its fields. Readiness first,
    then every probe and mode and the least-privilege checks within ``options.timeout``, then the speculative draft's
    acceptance (its reads end by the same deadline: a hung server costs no time beyond it). The report's
    ``exit_code`` is 0 (holds), 1 (violated) or 3 (unreachable).
    """
    target = parse_target(target) if isinstance(target, str) else target
    opts = dataclasses.replace(options or VerifyOptions(), **changes)
    with read_limits(opts.limits):  # what the whole run may read
        return _run(target, opts)


def _run(target: Target, opts: VerifyOptions) -> VerifyReport:
    api_key, model, wait, timeout, suite = opts.api_key, opts.model, opts.wait, opts.timeout, opts.suite
    max_tokens, concurrency = opts.max_tokens, opts.concurrency
    concurrency = (load_probe.DEFAULT_CONCURRENCY if suite == FULL else 0) if concurrency is None else concurrency
    probes = suite_probes(suite) + agentic_probes(suite)
    if max_tokens is not None:
        probes = tuple(dataclasses.replace(p, max_tokens=min(p.max_tokens, max_tokens)) for p in probes)
    started = time.monotonic()
    readiness = wait_ready(
        target, started + wait, opts.progress, api_key=api_key, poll_timeout=min(POLL_TIMEOUT, timeout)
    )
    report = VerifyReport(
        target=target.base_url,
        suite=suite,
        readiness=readiness,
        model=model,
        key_source=opts.key_source or ("caller" if api_key else "none"),
    )
    if not readiness.ready:
        report.error = hx.not_ready(readiness, wait, address(target))
        report.error_unreachable = True
        report.elapsed_s = time.monotonic() - started
        return report
    deadline = time.monotonic() + timeout
    served: list[str] | None = None
    loads = load_probe.streams(concurrency if probes else 0, max_tokens)
    with (
        ThreadPoolExecutor(max_workers=CONNECTIONS, thread_name_prefix="verify") as pool,
        ThreadPoolExecutor(max_workers=max(1, len(loads)), thread_name_prefix="verify-load") as load_pool,
    ):
        info_future = pool.submit(server_info, target, deadline, api_key)
        leak_future = pool.submit(server_info_leaks, target, deadline, api_key)
        if model is None:
            data, failure, unreachable = get_json(target, "/v1/models", deadline, api_key, timeout)
            served = served_models(data) if failure is None else []
            if not served:
                listed = f"GET /v1/models lists no model: {clip(json.dumps(data))}"
                no_model = problem("no_models", listed, "pass --model NAME")
                report.error = _name_key_source(failure, report.key_source) if failure else no_model
                report.error_unreachable = unreachable
                info_future.cancel()
                leak_future.cancel()
                report.elapsed_s = time.monotonic() - started
                return report
            model = served[0]
        report.model = model
        fam = resolve_family(opts.family, model)
        calls = [(p, m) for p in for_family(probes, fam) for m in p.modes]
        from kimi_serve.verify.parser_faults import parser_checks
        from kimi_serve.verify.privilege import privilege_checks

        # verify's own requests queue for the CONNECTIONS slots: first the quick ones that need no model answer
        # (least privilege, the parser faults: each within 5 s), then the longest probes (the most tokens, two
        # turns), so the run still takes about its slowest probe; the load probe's streams all at once (their own
        # pool), once the tool probe's stream has been answered alone (what the load's verdict compares with)
        checks_by = max(deadline, time.monotonic() + POLL_TIMEOUT)
        privilege_future = pool.submit(privilege_checks, target, api_key, checks_by, opts.expected_ports)
        parser_future = pool.submit(parser_checks, target, api_key, checks_by)
        budget_future = (
            pool.submit(check_budget, target, model, api_key, deadline, timeout, send=max_tokens is None)
            if probes
            else None
        )
        by_length = sorted(range(len(calls)), key=lambda i: (-calls[i][0].max_tokens, calls[i][0].follow_up is None))
        submitted = {i: pool.submit(attempt, target, *calls[i], model, api_key, deadline, timeout) for i in by_length}
        futures: list[Future[ProbeOutcome]] = [submitted[i] for i in range(len(calls))]
        lone = next((f for (p, m), f in zip(calls, futures, strict=True) if (p.name, m) == ("tool", STREAM)), None)
        load_futures = [
            load_pool.submit(_after, lone, deadline, attempt, target, p, STREAM, model, api_key, deadline, timeout)
            for p in loads
        ]
        how: dict[str, Any] = {"model": model, "api_key": api_key, "deadline": deadline, "timeout": timeout}
        extras = raw_calls(suite, target, **how, stop_ids=fam.eos_ids)
        if probes:  # a chat suite: the token accounting, and the family's own probes (verify/family_probe.py)
            extras += family_calls(fam, target, **how, configured=opts.preserve_thinking, max_tokens=max_tokens)
        extra_futures = [pool.submit(fn) for _, _, fn in extras]
        pending: list[Future[Any]] = [*futures, *load_futures, *extra_futures, info_future, leak_future]
        pending += [budget_future] if budget_future else []
        wait_futures(pending, timeout=max(0.0, deadline - time.monotonic()) + _GRACE)
        server = info_future.result() if info_future.done() else {}
        leaks = leak_future.result() if leak_future.done() else []
        report.server = server
        for (probe, mode), future in zip(calls, futures, strict=True):
            outcome = outcome_of(future, timeout)
            if outcome.failure is not None:
                outcome.failure = _name_key_source(outcome.failure, report.key_source)
            result = result_of(probe, mode, outcome, server)
            if outcome.answer is not None and outcome.answer.spec is not None:
                report.spec_samples.append(outcome.answer.spec)
            if outcome.model_404:
                if served is None:
                    data, _, _ = get_json(target, "/v1/models", time.monotonic() + POLL_TIMEOUT, api_key, POLL_TIMEOUT)
                    served = served_models(data)
                result = dataclasses.replace(result, findings=(hx.model_not_found(model, served),))
            report.probes.append(result)
        if loads:
            alone = [p.passed for p in report.probes if (p.probe, p.mode) == ("tool", STREAM)]
            outcomes = [outcome_of(f, timeout) for f in load_futures]
            loaded = [result_of(p, STREAM, o, server) for p, o in zip(loads, outcomes, strict=True)]
            report.probes.append(load_probe.aggregate(loaded, alone[0] if alone else None))
            report.concurrency = len(loads)
        if budget_future is not None:
            late = ProbeResult("budget", "non-stream", timeout, (no_answer(timeout, "read the log"),))
            report.budget, budget_result = budget_future.result() if budget_future.done() else (None, late)
            report.probes.append(budget_result)
        report.thinking_off = _dialects(report.probes)
        for (probe, mode, _), extra in zip(extras, extra_futures, strict=True):
            late = ProbeResult(probe.name, mode, timeout, (no_answer(timeout),))
            report.probes.append(extra.result() if extra.done() else late)
    report.checks, report.listeners = privilege_future.result()
    report.checks += _parser_checks(parser_future.result(), report)
    report.checks += leaks  # a key handed to clients: a least-privilege FAIL (verify/leaks.py)
    if report.probes and report.error is None and suite != RAW:  # the raw suite sends no chat probe to read
        judge_draft(report, target, api_key, opts.accept_floor, opts.spec_expected, deadline)
    report.elapsed_s = time.monotonic() - started
    return report
