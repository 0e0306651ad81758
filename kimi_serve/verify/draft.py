"""The speculative draft's health: the acceptance the server reports for verify's own probes, judged.

SGLang 0.5.23 reports acceptance per request when asked (``return_spec_tokens_details``: the response's
``sglext.spec_tokens_details``, ``spec_accept_length`` = completion tokens / verify steps, ``spec_verify_ct``) and per
server on ``/metrics`` (``sglang:spec_accept_length``, ``sglang:spec_accept_rate``; no key needed). Whether speculative
decoding is on, and which draft, comes from ``/server_info`` (``speculative_algorithm``,
``speculative_draft_model_path``); where the server does not say, from the caller (a profile) or from the answers.

The verdicts (:func:`findings`: ``draft_dead``, ``draft_below_floor``, ``draft_acceptance_unreported``) are
docs/verify.md's "The draft's health". The mean over the probes weighs each answer by its verify steps (total tokens /
total steps, SGLang's own formula); fewer than ``MIN_STEPS`` steps in all is too few to judge, and ``/metrics`` is
used then. With speculative decoding off nothing is judged.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kimi_serve.core.findings import Finding
from kimi_serve.core.report import json_meta, rounded
from kimi_serve.verify.discovery import fetch, fetch_json
from kimi_serve.verify.readiness import POLL_TIMEOUT
from kimi_serve.verify.report import ProbeResult, VerifyReport, problem, warning
from kimi_serve.verify.target import Target

DEAD_AT = 1.2  # tokens per verify step at or below which the draft does nothing
DEFAULT_FLOOR = 2.3  # low end of the published 2.3-3.8 accepted tokens per step for K2.5's EAGLE-3 drafts
MIN_STEPS = 8  # verify steps the probes must add up to before their mean is judged
PROBE = "draft"
SPEC_DETAILS = {"return_spec_tokens_details": True}  # what a non-streamed probe adds to its request body
_METRIC = re.compile(r"^sglang:(spec_accept_length|spec_accept_rate)(?:\{[^}]*\})?\s+(\S+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class SpecSample:
    """One answer's ``sglext.spec_tokens_details``: its mean accept length and the verify steps behind it."""

    accept_length: float
    verify_ct: int


def spec_sample(body: Any) -> SpecSample | None:
    """The acceptance a chat completion reports in ``sglext.spec_tokens_details`` (the first choice's when a list);
    None when it carries none or nonsense (wire data is untrusted)."""
    sglext = body.get("sglext") if isinstance(body, dict) else None
    details = sglext.get("spec_tokens_details") if isinstance(sglext, dict) else None
    if isinstance(details, list):
        details = details[0] if details else None
    if not isinstance(details, dict):
        return None
    length, steps = details.get("spec_accept_length"), details.get("spec_verify_ct")
    if isinstance(length, bool) or not isinstance(length, (int, float)) or not math.isfinite(length):
        return None
    if isinstance(steps, bool) or not isinstance(steps, int) or steps <= 0 or length < 0:
        return None
    return SpecSample(float(length), steps)


@dataclass(frozen=True)
class ServerSpec:
    """What the server says about its speculative decoding: settings (``/server_info``) and ``/metrics``."""

    known: bool = False  # /server_info answered with SGLang's server args
    algorithm: str | None = None
    draft_path: str | None = None
    metrics_accept_length: float | None = None
    metrics_accept_rate: float | None = None
    stand_in: str | None = None  # the simulator's own words about its stand-in draft


def _series(pattern: re.Pattern[str], text: str) -> dict[str, list[float]]:
    """The finite values of each metric ``pattern`` names in Prometheus text, one per series."""
    seen: dict[str, list[float]] = {}
    for name, value in pattern.findall(text):
        try:
            number = float(value)
        except ValueError:
            continue
        if math.isfinite(number):
            seen.setdefault(name, []).append(number)
    return seen


def parse_metrics(text: str) -> dict[str, float]:
    """``spec_accept_length`` / ``spec_accept_rate`` from Prometheus text (the mean over series when several)."""
    return {name: sum(values) / len(values) for name, values in _series(_METRIC, text).items()}


_COUNTER = re.compile(
    r"^sglang:(generation_tokens_total|spec_verify_calls_total)(?:\{[^}]*\})?\s+(\S+)\s*$", re.MULTILINE
)


def read_counters(target: Target, deadline: float, api_key: str | None) -> tuple[float, float] | None:
    """(``sglang:generation_tokens_total``, ``sglang:spec_verify_calls_total``) from ``/metrics``, each summed over its
    series; None when /metrics does not answer or carries no verify counter (speculative decoding off)."""
    body = fetch(target, "/metrics", deadline, api_key)
    sums = {k: sum(v) for k, v in _series(_COUNTER, body.decode("utf-8", "replace")).items()} if body else {}
    if "spec_verify_calls_total" not in sums:
        return None
    return sums.get("generation_tokens_total", 0.0), sums["spec_verify_calls_total"]


def delta_accept_length(before: tuple[float, float] | None, after: tuple[float, float] | None) -> float | None:
    """The mean accept length between two :func:`read_counters` readings: tokens generated / verify steps taken
    (SGLang's own per-request formula over the window); None without both readings or without a verify step."""
    if before is None or after is None:
        return None
    tokens, steps = after[0] - before[0], after[1] - before[1]
    return tokens / steps if steps > 0 and tokens >= 0 else None


def server_spec(target: Target, deadline: float, api_key: str | None) -> ServerSpec:
    """``/server_info``'s speculative settings and ``/metrics``' acceptance gauges; what does not answer is unknown."""
    info = fetch_json(target, "/server_info", deadline, api_key)
    known = isinstance(info, dict) and "speculative_algorithm" in info
    algorithm = info.get("speculative_algorithm") if known else None
    draft = info.get("speculative_draft_model_path") if known else None
    simulator = info.get("simulator") if isinstance(info, dict) else None
    stand_in = simulator.get("draft_acceptance") if isinstance(simulator, dict) else None
    gauges: dict[str, float] = {}
    if not known or algorithm:
        text = fetch(target, "/metrics", deadline, api_key)
        gauges = parse_metrics(text.decode("utf-8", "replace")) if text is not None else {}
    return ServerSpec(
        known=known,
        algorithm=algorithm if isinstance(algorithm, str) and algorithm else None,
        draft_path=draft if isinstance(draft, str) and draft else None,
        metrics_accept_length=gauges.get("spec_accept_length"),
        metrics_accept_rate=gauges.get("spec_accept_rate"),
        stand_in=stand_in if isinstance(stand_in, str) else None,
    )


@dataclass(frozen=True)
class Acceptance:
    """The draft's acceptance as verify measured it, and the floor it was judged against."""

    JSON_PROPERTIES: ClassVar[tuple[Any, ...]] = (("dead_at", lambda _: DEAD_AT),)

    # the figure judged: the probes' weighted mean, else /metrics'
    accept_length: float | None = field(metadata=json_meta(encode=rounded(3)))
    source: str  # "probes", "/metrics" or "none"
    verify_steps: int  # the probes' verify steps in all
    answers: int  # answers that reported acceptance
    metrics_accept_length: float | None
    metrics_accept_rate: float | None
    floor: float | None
    draft_path: str | None = field(metadata=json_meta(key="draft"))
    algorithm: str | None
    stand_in: str | None = None


def measure(
    samples: list[SpecSample], server: ServerSpec, *, floor: float | None, spec_expected: bool | None = None
) -> Acceptance | None:
    """The acceptance to judge; None when speculative decoding is off (the server says so, or nothing shows it on:
    neither the caller, nor the server's settings, nor its answers)."""
    if server.known and server.algorithm is None:
        return None
    if not server.known and not spec_expected and not samples and server.metrics_accept_length is None:
        return None
    steps = sum(s.verify_ct for s in samples)
    length: float | None
    if steps >= MIN_STEPS:
        length, source = sum(s.accept_length * s.verify_ct for s in samples) / steps, "probes"
    elif server.metrics_accept_length is not None and server.metrics_accept_length > 0:
        length, source = server.metrics_accept_length, "/metrics"
    else:
        length, source = None, "none"
    return Acceptance(
        length,
        source,
        steps,
        len(samples),
        server.metrics_accept_length,
        server.metrics_accept_rate,
        floor,
        server.draft_path,
        server.algorithm,
        server.stand_in,
    )


def _draft(acc: Acceptance) -> str:
    name = acc.draft_path or "the draft (--speculative-draft-model-path)"
    return f"{name} ({acc.stand_in})" if acc.stand_in else name


def findings(acc: Acceptance) -> tuple[list[Finding], list[Finding]]:
    """(failures, warnings) for a measured acceptance."""
    if acc.accept_length is None:
        return [], [
            warning(
                "draft_acceptance_unreported",
                "speculative decoding is on but the server reported no acceptance (no sglext.spec_tokens_details in "
                "its answers, no sglang:spec_accept_length on /metrics): the draft's health is unknown",
                "point --host at SGLang itself (a proxy that strips sglext hides it) and start it with "
                "--enable-metrics (profile server.enable_metrics: true)",
            )
        ]
    figure = f"mean accept length {acc.accept_length:.2f} tokens/step ({_where(acc)})"
    if acc.accept_length <= DEAD_AT:
        return [
            problem(
                "draft_dead",
                f"{figure}, at or below {DEAD_AT:g}: the draft {_draft(acc)} accepts next to nothing, so every "
                "step pays for drafting and verifying and the server is slower than without speculative decoding",
                f"check the draft at {acc.draft_path or '--speculative-draft-model-path'}: a draft trained for "
                "another model or with another vocab (its config.json vocab_size and the target's differ), a wrong "
                "or partial download, or draft weights lost after a release/resume; fix it or turn speculative "
                "decoding off (speculative.enabled: false) and restart",
            )
        ], []
    if acc.floor is not None and acc.accept_length < acc.floor:
        return [], [
            warning(
                "draft_below_floor",
                f"{figure}, below the expected floor {acc.floor:g} for the draft {_draft(acc)}",
                "a draft for another checkpoint or quantization, or traffic unlike its training data; compare with "
                "`kimi-serve bench` per workload, or set speculative.accept_floor if this figure is expected",
            )
        ]
    return [], []


def _where(acc: Acceptance) -> str:
    if acc.source == "probes":
        return f"over {acc.verify_steps} verify steps of {acc.answers} probe answers"
    return "sglang:spec_accept_length on /metrics"


def result(acc: Acceptance) -> ProbeResult:
    """The draft's verdict as one probe row of the report (``draft``, judged once per run)."""
    failures, warnings = findings(acc)
    detail = ""
    if acc.accept_length is not None:
        detail = f"mean accept length {acc.accept_length:.2f} tokens/step ({_where(acc)})"
        if acc.source == "probes" and acc.metrics_accept_length is not None:
            detail += f"; /metrics {acc.metrics_accept_length:.2f}"
        if acc.floor is not None:
            detail += f"; floor {acc.floor:g}"
        if acc.stand_in:
            detail += f"; {acc.stand_in}"
    return ProbeResult(PROBE, "non-stream", 0.0, tuple(failures), warnings=tuple(warnings), detail=detail)


def judge_draft(
    report: VerifyReport,
    target: Target,
    api_key: str | None,
    floor: float | None,
    expected: bool | None,
    deadline: float,
) -> None:
    """The draft's acceptance over the report's probe answers and /metrics (read after them, by ``deadline`` and at
    most :data:`POLL_TIMEOUT` from now), added to ``report`` as the ``draft`` row; nothing with speculative decoding
    off."""
    spec = server_spec(target, min(deadline, time.monotonic() + POLL_TIMEOUT), api_key)
    acceptance = measure(report.spec_samples, spec, floor=floor, spec_expected=expected)
    if acceptance is not None:
        report.acceptance = acceptance
        report.probes.append(result(acceptance))
