"""The load probe: N streamed tool calls at once (``--concurrency``, ``full`` only), every one parsed.

A server can parse a call alone and lose it under concurrency: vLLM sent empty tool-call deltas with 6-14 concurrent
streams and was fine with one (vllm-project/vllm#54701). Agents that run sub-agents or parallel sessions stream
several calls at once. The runner sends :data:`LOAD` N times, each judged by the tool rules (a sampling model's
off-day gets its one more try, as every probe's does); :func:`aggregate` makes one result of them.
"""

from __future__ import annotations

import dataclasses

from kimi_serve.verify.probes import STREAM, TOOL, Probe
from kimi_serve.verify.report import ProbeResult, problem

DEFAULT_CONCURRENCY = 8  # full's default
MAX_CONCURRENCY = 64
LOAD = dataclasses.replace(TOOL, name="load", modes=(STREAM,))
CITIES = ("Berlin", "Lisbon", "Vienna", "Oslo", "Dublin", "Prague", "Warsaw", "Athens")


def streams(n: int, max_tokens: int | None) -> list[Probe]:
    """The N requests: the tool probe's, each for its own city (N different requests, as N agents send)."""
    out = []
    for i in range(n):
        city = CITIES[i % len(CITIES)] + (f" {i // len(CITIES) + 1}" if i >= len(CITIES) else "")
        text = f"What is the weather in {city} right now? Use the get_weather tool."
        cap = min(LOAD.max_tokens, max_tokens or LOAD.max_tokens)
        out.append(dataclasses.replace(LOAD, messages=[{"role": "user", "content": text}], max_tokens=cap))
    return out


CLIENTS = "agents that run sub-agents or parallel sessions (opencode, the AI SDK, openai-agents)"


def aggregate(results: list[ProbeResult], alone_passed: bool | None) -> ProbeResult:
    """One ``load`` result from the N streams' results; ``alone_passed``: whether the single streamed ``tool`` probe
    passed (None: not known), so the finding can say the fault shows only under load."""
    n = len(results)
    latency = max((r.latency_s for r in results), default=0.0)
    attempts = max((r.attempts for r in results), default=1)
    failed = [r for r in results if not r.passed]
    if not failed:
        return ProbeResult(LOAD.name, STREAM, latency, attempts=attempts, detail=f"{n}/{n} concurrent streams parsed")
    if all(r.unreachable for r in failed):
        return ProbeResult(LOAD.name, STREAM, latency, (failed[0].findings[0],), unreachable=True, attempts=attempts)
    first = next(r for r in failed if not r.unreachable).findings[0]
    if alone_passed is False:  # it fails alone too: the tool probe's own finding, not a fault of load
        shown = problem(first.code, f"{len(failed)} of {n} concurrent streams: {first.message}", first.fix)
        return ProbeResult(LOAD.name, STREAM, latency, (shown,), attempts=attempts)
    alone = " while one alone is parsed" if alone_passed else ""
    finding = problem(
        "load_dropped_calls",
        f"{len(failed)} of {n} concurrent streamed tool calls failed{alone} (first: {first.code}: {first.message}); "
        f"{CLIENTS} lose those calls",
        "the server loses tool calls under concurrency (the fault of vllm-project/vllm#54701: empty tool-call "
        "deltas with 6-14 streams): read the SGLang log for those requests, check --tool-call-parser kimi_k2 and the "
        "speculative decoding settings, and rerun with a lower --concurrency to find where it starts",
    )
    return ProbeResult(LOAD.name, STREAM, latency, (finding,), attempts=attempts)
