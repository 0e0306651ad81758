"""verify's agentic probes against SGLang 0.5.23's own serving layer (the simulator) with prod's exact flags, on stock
SGLang (the ``stock_sglang`` fixture: the Kimi patch set reverted): quick and full pass, with the two warnings such a
server earns (Moonshot's `thinking` dialect is ignored by stock SGLang; the served 131,072-token context is below
K2.5's published 262,144); on the engine as prod runs it (its patch sets applied) Moonshot's dialect is honoured and
only the context warning stays; the same flags without a tool parser, without a reasoning
parser, or without both fail with the findings that name what breaks which clients; and the official openai SDK reads
what the probes accept (the loop's two turns, strict tools)."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from sim_pool import SimulatorPool, prod_flags

from kimi_serve.core.report import to_json
from kimi_serve.simulator import launcher
from kimi_serve.verify import run_verify
from kimi_serve.verify.agentic import REPLAYS, STRICT, loop, second_turn
from kimi_serve.verify.answer import answer_from_json
from kimi_serve.verify.render import render_lines

STEP = "0.001"


@pytest.fixture(scope="module")
def prod(stock_simulator_pool: SimulatorPool) -> launcher.Simulator:
    return stock_simulator_pool.get(prod_flags(), step=STEP)


def _codes(report: Any) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for p in report.probes:
        out.setdefault(p.probe, set()).update(f.code for f in p.findings)
    return out


@pytest.mark.parametrize("suite", ["quick", "full"])
def test_prod_flags_pass_with_the_warnings_prod_earns(prod: launcher.Simulator, suite: str) -> None:
    report = run_verify(prod.base_url, suite=suite, timeout=150)
    assert report.exit_code == 0, [p.to_dict() for p in report.probes if not p.passed]
    warned = {w.code for p in report.probes for w in p.warnings}
    assert {"thinking_ignored.thinking", "context_budget"} <= warned
    assert "thinking_ignored.reasoning_effort" not in warned
    assert report.thinking_off == {
        "chat_template_kwargs": "honoured",
        "reasoning_effort": "honoured",
        "thinking": "ignored",
    }
    budget = to_json(report.budget)
    assert (budget["context_length"], budget["max_output_tokens"], budget["accepted"], budget["status"]) == (
        131072,
        131072,
        False,
        400,
    )
    names = {p.probe for p in report.probes}
    assert {"strict-tool", "loop", "instant-effort", "instant-moonshot", "budget"} <= names
    if suite == "full":
        assert {"loop-parts", "loop-no-reasoning", "strict-parallel", "load"} <= names
        load = next(p for p in report.probes if p.probe == "load")
        assert load.detail == "8/8 concurrent streams parsed" and report.concurrency == 8


def test_the_engine_with_prods_patch_sets_honours_moonshots_thinking_field(simulator_pool: SimulatorPool) -> None:
    """The CPU engine carries prod's patch sets (scripts/build-cpu-venv.sh), as prod's engine does: what the
    quickstart's contract dry run shows is what prod serves, with no warning that the Kimi set would fix."""
    report = run_verify(simulator_pool.get(prod_flags(), step=STEP).base_url, suite="quick", timeout=150)
    assert report.exit_code == 0, [p.to_dict() for p in report.probes if not p.passed]
    warned = {w.code for p in report.probes for w in p.warnings}
    assert warned == {"context_budget"}, warned
    assert report.thinking_off == dict.fromkeys(("chat_template_kwargs", "reasoning_effort", "thinking"), "honoured")


# flags left out -> {probe: the finding it must fail with}
MISCONFIGURED = {
    "no-tool-parser": (("--tool-call-parser",), {"strict-tool": "raw_tool_tokens", "loop": "raw_tool_tokens"}),
    "no-reasoning-parser": (
        ("--reasoning-parser",),
        {"strict-tool": "strict_call_dropped", "loop": "think_in_content", "instant-moonshot": "think_in_content"},
    ),
    "neither": (("--tool-call-parser", "--reasoning-parser"), {"loop": "raw_tool_tokens"}),
}
# the same servers: {probe: the finding each of its failed modes has, words in its message + fix}
DIAGNOSED = {
    "no-tool-parser": {"tool": ("raw_tool_tokens", "--tool-call-parser kimi_k2")},
    "no-reasoning-parser": {"reasoning": ("think_in_content", "--reasoning-parser kimi_k2")},
    "neither": {"tool": ("raw_tool_tokens", "<|tool_calls_section_begin|>")},
}


@pytest.mark.parametrize("name", sorted(MISCONFIGURED))
def test_misconfigured_servers_fail_with_the_right_findings(stock_simulator_pool: SimulatorPool, name: str) -> None:
    leave_out, expected = MISCONFIGURED[name]
    sim = stock_simulator_pool.get(prod_flags(*leave_out), step=STEP)
    report = run_verify(sim.base_url, suite="quick", timeout=150)
    assert report.exit_code == 1 and report.status == "fail"
    codes = _codes(report)
    for probe, code in expected.items():
        assert code in codes[probe], (probe, codes)
    for probe, (code, words) in DIAGNOSED[name].items():
        failed = [p for p in report.probes if p.probe == probe and not p.passed]
        assert failed, (probe, codes)
        for result in failed:
            finding = next((f for f in result.findings if f.code == code), None)
            assert finding is not None and finding.fix, result.to_dict()
            assert words in finding.message + finding.fix
    if name == "neither":  # the production bug: both parsers named, and the profile keys that set them
        tool = next(p for p in report.probes if p.probe == "tool" and p.mode == "stream")
        assert tool.findings[0].code == "raw_tool_tokens"
        assert "the server reports no tool_call_parser" in tool.findings[0].message
        assert "parsers.tool_call: kimi_k2" in tool.findings[0].fix
        reasoning = next(p for p in report.probes if p.probe == "reasoning" and p.mode == "non-stream")
        assert reasoning.findings[0].code == "think_in_content"
        assert "parsers.reasoning: kimi_k2" in reasoning.findings[0].fix
    # the last line names the one cause the failures share: the flags left out (the server reports both absent)
    flags = " ".join(f"{flag} kimi_k2" for flag in leave_out)
    failed = [p for p in report.probes if not p.passed]
    last = render_lines(report).splitlines()[-1]
    assert last.startswith("verify: contract VIOLATED: ") and last.endswith(
        f"; cause: started without `{flags}`: {len(failed)} probes failed"
    ), last
    # this engine's kimi_k2 parser is unpatched; a server that does not run it gets no patch advice for it
    parser = {c.code: c.status for c in report.checks if c.code.startswith("parser.")}
    assert parser == dict.fromkeys(parser, "skip" if "--tool-call-parser" in leave_out else "warn") and parser
    if name == "no-reasoning-parser":
        strict = next(f for p in report.probes if p.probe == "strict-tool" for f in p.findings)
        assert "the server reports no reasoning_parser" in strict.message
        assert "openai-agents and pydantic-ai" in strict.message and "--reasoning-parser kimi_k2" in strict.fix


def _sdk_turn(client: openai.OpenAI, body: dict[str, Any], stream: bool) -> Any:
    """What the openai SDK makes of one of verify's requests (its own stream accumulator when streaming)."""
    fields = {k: v for k, v in body.items() if k not in ("stream", "chat_template_kwargs", "thinking")}
    extra = {k: body[k] for k in ("chat_template_kwargs", "thinking") if k in body}
    if not stream:
        return client.chat.completions.create(**fields, extra_body=extra or None)
    state: ChatCompletionStreamState = ChatCompletionStreamState()
    for chunk in client.chat.completions.create(**fields, extra_body=extra or None, stream=True):
        state.handle_chunk(chunk)
    return state.get_final_completion()


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
def test_the_openai_sdk_reads_what_the_probes_accept(prod: launcher.Simulator, stream: bool) -> None:
    client = openai.OpenAI(base_url=f"{prod.base_url}/v1", api_key="unused", max_retries=0, timeout=60)
    first = _sdk_turn(client, loop("loop", ("stream",)).body("kimi-k2.5", stream), stream)
    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"
    assert message.tool_calls[0].id == "functions.get_weather:0" and message.tool_calls[0].function.name
    assert (message.model_extra or {}).get("reasoning_content")
    # verify's own reading of the same answer builds the follow-up the SDK sends
    follow = second_turn("loop", REPLAYS["loop"], answer_from_json(first.model_dump()))
    assert follow is not None
    answer = _sdk_turn(client, follow.body("kimi-k2.5", stream), stream).choices[0]
    assert answer.finish_reason == "stop" and answer.message.content and not answer.message.tool_calls
    strict = _sdk_turn(client, STRICT.body("kimi-k2.5", stream), stream).choices[0]
    assert strict.message.tool_calls and strict.message.tool_calls[0].function.name == "get_weather"
