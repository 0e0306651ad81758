"""Each family served by the simulator (SGLang's own serving layer, its template and stop id per family) and verify
judging it by the family's rules (docs/families.md): one pooled simulator per family, the quick suite (+ raw)."""

from __future__ import annotations

import time

from sim_pool import SimulatorPool

from kimi_serve.core.family import family
from kimi_serve.profile.launch import build_launch
from kimi_serve.profile.loader import load_profile
from kimi_serve.verify import run_verify
from kimi_serve.verify.answer import answer_from_json
from kimi_serve.verify.exchange import judge
from kimi_serve.verify.family_probe import PRESERVE, run_preserve_probe
from kimi_serve.verify.probes import INSTANT, Probe
from kimi_serve.verify.raw import post
from kimi_serve.verify.target import parse_target

PROBE = Probe(PRESERVE, [], lambda _a, _s: [])


def _flags(profile: str) -> list[str]:
    """The family profile's own SGLang flags on the simulator: its model, draft and defaults, without the key file."""
    args = list(build_launch(load_profile(profile), "python").server_args)
    out, i = [], 0
    while i < len(args):
        if args[i] in ("--port", "--config", "--host"):
            i += 2
            continue
        out.append(args[i])
        i += 1
    return [*out, "--host", "127.0.0.1"]


def _codes(report) -> dict[str, set[str]]:
    return {p.probe: {f.code for f in p.findings} for p in report.probes if p.findings}


def test_k26_simulator_serves_its_stop_id_and_preserve_thinking(simulator_pool: SimulatorPool):
    sim = simulator_pool.get(_flags("prod-k26"), step="0")
    target, fam = parse_target(sim.base_url), family("kimi-k2.6")
    # prod-k26 (preserve_thinking: false, rendered as --default-chat-template-kwargs): dropped by default, kept when
    # a request asks; the probe reads the default from /server_info
    right = run_preserve_probe(PROBE, target, fam, model="kimi-k2.6", configured=None, **_at())
    assert right.passed and right.detail == "earlier reasoning dropped by default", right
    # a profile that says "kept" against this server: the finding, with the expectation
    wrong = run_preserve_probe(PROBE, target, fam, model="kimi-k2.6", configured=True, **_at())
    assert [f.code for f in wrong.findings] == ["preserve_thinking"] and "expected kept" in wrong.findings[0].message
    # the raw path: K2.6 stops on <|im_end|> 163586 only, and verify holds it to that
    raw = run_verify(sim.base_url, suite="raw", timeout=120)
    assert raw.exit_code == 0, _codes(raw)


def test_k27_code_simulator_is_not_judged_on_instant_probes(simulator_pool: SimulatorPool):
    sim = simulator_pool.get(_flags("prod-k27-code"), step="0")
    report = run_verify(sim.base_url, suite="quick", timeout=120)  # the family from the served name
    assert report.exit_code == 0, _codes(report)
    names = {p.probe for p in report.probes}
    assert not names & {"instant", "instant-effort", "instant-moonshot"} and "preserve-thinking" in names
    # thinking off asked of K2.7-Code still thinks: the instant probe's rules would fail this healthy server
    posted = post(parse_target(sim.base_url), "/v1/chat/completions", INSTANT.body("kimi-k2.7-code", False), **_at())
    failures, _ = judge(INSTANT, answer_from_json(posted.data), {})
    assert failures, posted.data


def _at() -> dict:
    return {"api_key": None, "deadline": time.monotonic() + 60, "timeout": 60.0}
