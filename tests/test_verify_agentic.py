"""verify's agentic probes: the judgement on recorded responses (SGLang 0.5.23's own answers, recorded from the
simulator with prod's flags and with parsers left out), then the whole run against the contract stand-in
(tests/contract_server.py) for what only a run shows: the loop's replay, the budget, the load probe, the report."""

from __future__ import annotations

import json

import pytest
from contract_server import ContractServer

from kimi_serve.cli import main
from kimi_serve.verify import agent_rules as rules
from kimi_serve.verify import run_verify
from kimi_serve.verify.agentic import REPLAYS, STRICT_TOOLS, loop, second_turn
from kimi_serve.verify.answer import answer_from_json
from kimi_serve.verify.budget import SIZED, judge_sized, served_limits
from kimi_serve.verify.load import aggregate
from kimi_serve.verify.report import ProbeResult, problem

TIMEOUT = 20.0
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in STRICT_TOOLS}
CALL = {
    "id": "functions.get_weather:0",
    "index": 0,
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
REASONED = "The user asks: What is the weather in Paris right now? The best matching tool is get_weather."


def _answer(content: str, reasoning: str | None = None, calls: list | None = None, finish: str = "stop"):  # type: ignore[no-untyped-def]
    message = {"role": "assistant", "content": content, "reasoning_content": reasoning}
    if calls:
        message["tool_calls"] = calls
    return answer_from_json({"choices": [{"index": 0, "message": message, "finish_reason": finish}]})


# --- strict tools ---------------------------------------------------------------------------------------------------


def test_a_strict_call_that_never_came_names_the_clients_and_the_reasoning_parser() -> None:
    # recorded: SGLang 0.5.23 without --reasoning-parser, strict get_weather offered: the grammar from the first token
    dropped = _answer(REASONED)
    found = rules.strict_findings(dropped, SCHEMAS, {"reasoning_parser": None}, min_calls=1)
    assert [f.code for f in found] == ["strict_call_dropped"]
    assert "openai-agents and pydantic-ai" in found[0].message
    assert "the server reports no reasoning_parser" in found[0].message
    assert "--reasoning-parser kimi_k2" in found[0].fix


def test_a_strict_call_that_came_passes_and_other_faults_keep_their_code() -> None:
    assert rules.strict_findings(_answer("", REASONED, [CALL], "tool_calls"), SCHEMAS, {}, min_calls=1) == []
    late = rules.strict_findings(_answer("", REASONED, [CALL], "stop"), SCHEMAS, {}, min_calls=1)
    assert [f.code for f in late] == ["finish_reason"]
    assert [f.code for f in rules.strict_findings(_answer("", None, [CALL], "tool_calls"), SCHEMAS, {}, min_calls=2)]
    assert rules.strict_findings(_answer("", None, [CALL], "tool_calls"), SCHEMAS, {}, min_calls=2)[0].code == (
        "parallel_calls"
    )


# --- the tool loop ------------------------------------------------------------------------------------------------


def test_the_follow_up_replays_the_servers_own_call_as_each_client_does() -> None:
    first = _answer("", REASONED, [CALL], "tool_calls")
    with_reasoning = second_turn("loop", REPLAYS["loop"], first)
    assert with_reasoning is not None
    user, assistant, result = with_reasoning.messages
    assert assistant["tool_calls"] == [{"id": CALL["id"], "type": "function", "function": CALL["function"]}]
    assert assistant["reasoning_content"] == REASONED and assistant["content"] == ""
    assert result == {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": result["content"]}
    assert isinstance(user["content"], str) and isinstance(result["content"], str)
    parts = second_turn("loop-parts", REPLAYS["loop-parts"], first)
    assert parts is not None
    assert parts.messages[1]["content"] == []  # kimi-cli: `content: []` beside the calls
    assert parts.messages[2]["content"][0]["type"] == "text" and parts.messages[0]["content"][0]["type"] == "text"
    bare = second_turn("loop-no-reasoning", REPLAYS["loop-no-reasoning"], first)
    assert bare is not None and "reasoning_content" not in bare.messages[1]
    assert second_turn("loop", REPLAYS["loop"], _answer("It is sunny.")) is None  # nothing to replay


def test_a_follow_up_that_answers_passes() -> None:
    answer = _answer("It is 18 °C and sunny in Paris.", "The tool returned its result.")
    assert rules.follow_up_findings(answer, (_answer("", None, [CALL], "tool_calls").tool_calls[0],), "replay") == []


def test_the_same_call_again_is_a_loop_and_another_call_is_model_noise() -> None:
    again = _answer("", "I need the weather.", [CALL], "tool_calls")
    found = rules.follow_up_findings(
        again, (_answer("", None, [CALL], "tool_calls").tool_calls[0],), "history as opencode sends it"
    )
    assert [f.code for f in found] == ["tool_loop"]
    assert "functions.get_weather:0" in found[0].message and "opencode" in found[0].message
    assert "## Return of functions.NAME:IDX" in found[0].fix
    other = dict(CALL, function={"name": "get_weather", "arguments": '{"city": "Tokyo"}'})
    assert [
        f.code for f in rules.follow_up_findings(_answer("", None, [other], "tool_calls"), (again.tool_calls[0],), "r")
    ] == ["unexpected_tool_call"]


def test_an_empty_answer_right_after_think_names_kimi_k2_128() -> None:
    found = rules.follow_up_findings(_answer("", "The tool returned its result."), (), "history as the AI SDK sends it")
    assert [f.code for f in found] == ["empty_after_think"]
    assert "MoonshotAI/Kimi-K2#128" in found[0].message and "the AI SDK" in found[0].message
    assert [f.code for f in rules.follow_up_findings(_answer(""), (), "r")] == ["content_missing"]


# --- thinking off -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", [d for d, _, _ in rules.DIALECTS])
def test_each_thinking_dialect_ignored_is_a_warning_naming_who_sends_it(dialect: str) -> None:
    clients = next(c for d, _, c in rules.DIALECTS if d == dialect)
    # recorded: Moonshot's dialect on SGLang 0.5.23 with prod's flags (reasoning_content came back)
    ignored = _answer("Paris", "The user asks: What is the capital of France? No tool is needed.")
    found = rules.dialect_findings(ignored, dialect, clients)
    assert [(f.code, f.status) for f in found] == [(f"thinking_ignored.{dialect}", "warn")]
    assert clients in found[0].message and "reasoning_content" in found[0].message
    assert 'chat_template_kwargs: {"thinking": false}' in found[0].fix
    assert rules.dialect_findings(_answer("Paris"), dialect, clients) == []
    # no reasoning parser: the reasoning shows in content before </think>
    leaked = rules.dialect_findings(_answer("The user asks.</think>Paris"), dialect, clients)
    assert [f.code for f in leaked] == [f"thinking_ignored.{dialect}"] and "in content" in leaked[0].message


def test_the_report_says_which_dialect_is_honoured() -> None:
    assert rules.honoured(()) == "honoured"
    assert rules.honoured((problem("instant_reasoning", "m", "f"),)) == "ignored"
    assert rules.honoured(tuple(rules.dialect_findings(_answer("P", "r" * 20), "thinking", "c"))) == "ignored"
    assert rules.honoured((problem("http_5xx", "m", "f"),)) == "unknown"


# --- the budget ---------------------------------------------------------------------------------------------------

MODELS = {"object": "list", "data": [{"id": "kimi-k2.5", "object": "model", "max_model_len": 131072}]}
REFUSED = "max_completion_tokens is too large: 261056.This model supports at most 131072 completion tokens."


def test_the_served_limits_come_from_v1_models_then_server_info() -> None:
    budget = served_limits(MODELS, {"context_length": 65536, "allow_auto_truncate": False}, "kimi-k2.5")
    assert (budget.context_length, budget.source, budget.max_output_tokens) == (
        131072,
        "/v1/models max_model_len",
        131072,
    )
    fallback = served_limits({"data": [{"id": "other"}]}, {"context_length": 65536}, "kimi-k2.5")
    assert (fallback.context_length, fallback.source) == (65536, "/server_info context_length")
    truncating = served_limits(MODELS, {"allow_auto_truncate": True}, "kimi-k2.5")
    assert truncating.max_output_tokens is None  # SGLang lowers max_tokens then instead of refusing
    assert served_limits(None, None, "kimi-k2.5").context_length is None


def test_a_refused_sized_request_is_a_warning_with_the_number_to_configure() -> None:
    budget = served_limits(MODELS, None, "kimi-k2.5")
    (found,) = judge_sized(budget, 400, REFUSED)
    assert (found.code, found.status) == ("context_budget", "warn")
    assert "262,144" in found.message and f"{SIZED:,}" in found.message and "kimi-cli" in found.message
    assert "HTTP 400" in found.message and "supports at most 131072" in found.message
    assert "131,072 tokens" in found.fix and "model.context_length" in found.fix
    assert (
        judge_sized(budget, 200, "") == [] and judge_sized(budget, 401, "") == [] and judge_sized(budget, 500, "") == []
    )


def test_without_the_request_the_numbers_alone_judge() -> None:
    (found,) = judge_sized(served_limits(MODELS, None, "kimi-k2.5"), None, "")
    assert "would get HTTP 400" in found.message and "131,072" in found.message
    full = {"data": [{"id": "kimi-k2.5", "max_model_len": 262144}]}
    assert judge_sized(served_limits(full, None, "kimi-k2.5"), None, "") == []


# --- load ---------------------------------------------------------------------------------------------------------


def _stream(ok: bool, code: str = "unknown_function") -> ProbeResult:
    return ProbeResult("load", "stream", 1.0, () if ok else (problem(code, f"{code} message", "fix"),))


def test_calls_dropped_only_under_load_fail_saying_how_many_of_n() -> None:
    result = aggregate([_stream(True)] * 5 + [_stream(False)] * 3, alone_passed=True)
    (finding,) = result.findings
    assert finding.code == "load_dropped_calls"
    assert "3 of 8 concurrent streamed tool calls failed while one alone is parsed" in finding.message
    assert "vllm-project/vllm#54701" in finding.fix and "opencode" in finding.message
    passed = aggregate([_stream(True)] * 8, alone_passed=True)
    assert passed.passed and passed.detail == "8/8 concurrent streams parsed"


def test_a_fault_that_shows_alone_too_keeps_its_own_code() -> None:
    result = aggregate([_stream(False, "think_in_content")] * 8, alone_passed=False)
    assert result.findings[0].code == "think_in_content"
    assert result.findings[0].message.startswith("8 of 8 concurrent streams: ")


# --- whole runs against the stand-in ------------------------------------------------------------------------------


@pytest.mark.usefixtures("loopback_port")
@pytest.mark.parametrize(
    ("mode", "code", "words"),
    [
        ("loop-same-call", "tool_loop", "functions.get_weather:0"),
        ("empty-after-think", "empty_after_think", "MoonshotAI/Kimi-K2#128"),
        ("no-reasoning-parser", "strict_call_dropped", "openai-agents and pydantic-ai"),
    ],
)
def test_agentic_faults_fail_full_with_their_finding(mode: str, code: str, words: str) -> None:
    with ContractServer(mode) as srv:
        report = run_verify(srv.host, suite="full", timeout=TIMEOUT)
    assert report.exit_code == 1
    hits = [f for p in report.probes for f in p.findings if f.code == code]
    assert hits and all(words in f.message for f in hits), report.to_json()
    assert {p.probe for p in report.probes if any(f.code == code for f in p.findings)} >= (
        {"loop", "loop-parts", "loop-no-reasoning"} if code != "strict_call_dropped" else {"strict-tool"}
    )


@pytest.mark.usefixtures("loopback_port")
def test_a_server_that_drops_calls_under_load_fails_with_how_many() -> None:
    with ContractServer("drops-under-load") as srv:
        report = run_verify(srv.host, suite="quick", timeout=TIMEOUT, concurrency=8)
    by = {(p.probe, p.mode): p for p in report.probes}
    assert by[("tool", "stream")].passed
    load = by[("load", "stream")]
    assert not load.passed and load.findings[0].code == "load_dropped_calls", load.to_dict()
    assert " of 8 concurrent streamed tool calls failed while one alone is parsed" in load.findings[0].message
    assert report.exit_code == 1 and report.concurrency == 8


@pytest.mark.usefixtures("loopback_port")
def test_a_short_served_context_warns_and_the_report_has_the_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    with ContractServer(context_length=131072) as srv:
        code = main(["verify", "--host", srv.host, "--json", "--timeout", "20"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["status"] == "pass"
    assert report["budget"] == {
        "context_length": 131072,
        "source": "/v1/models max_model_len",
        "max_output_tokens": 131072,
        "published_context": 262144,
        "sized_request": SIZED,
        "accepted": False,
        "status": 400,
    }
    budget = next(p for p in report["probes"] if p["probe"] == "budget")
    assert budget["status"] == "pass" and [w["code"] for w in budget["warnings"]] == ["context_budget"]
    assert report["thinking_off"] == {
        "chat_template_kwargs": "honoured",
        "reasoning_effort": "honoured",
        "thinking": "ignored",
    }
    assert report["concurrency"] is None  # quick runs no load probe


@pytest.mark.usefixtures("loopback_port")
def test_an_ignored_reasoning_effort_warns_and_never_fails() -> None:
    with ContractServer("effort-ignored") as srv:
        report = run_verify(srv.host, suite="quick", timeout=TIMEOUT)
    assert report.exit_code == 0
    assert report.thinking_off["reasoning_effort"] == "ignored"
    effort = next(p for p in report.probes if p.probe == "instant-effort")
    assert [w.code for w in effort.warnings] == ["thinking_ignored.reasoning_effort"]


@pytest.mark.usefixtures("loopback_port")
def test_the_loop_sends_the_servers_own_ids_back(capsys: pytest.CaptureFixture[str]) -> None:
    with ContractServer("call-ids") as srv:  # call_<hex> ids: what the server said is what goes back
        report = run_verify(srv.host, suite="quick", timeout=TIMEOUT)
        follow = [b for b in srv.requests if any(m.get("role") == "tool" for m in b["messages"])]
    assert report.exit_code == 0
    assert follow and all(b["messages"][-1]["tool_call_id"].startswith("call_") for b in follow)
    # opencode's shape (reasoning goes back) and openai-agents' (it does not): quick sends both follow-ups
    assert sorted(bool(b["messages"][1].get("reasoning_content")) for b in follow) == [False, True]


def test_loop_probes_judge_the_first_turn_by_the_tool_rules() -> None:
    probe = loop("loop", ("stream",))
    assert [f.code for f in probe.check(_answer("I would look that up."), {})] == ["no_tool_call"]


@pytest.mark.usefixtures("loopback_port")
def test_a_server_that_refuses_a_replay_without_reasoning_names_who_sends_it() -> None:
    with ContractServer("reasoning-required") as srv:  # Moonshot's API's rule, e.g. through a gateway
        report = run_verify(srv.host, suite="full", timeout=TIMEOUT)
    failed = [p for p in report.probes if not p.passed]
    assert [(p.probe, p.findings[0].code) for p in failed] == [("loop-no-reasoning", "http_error")]
    message = failed[0].findings[0].message
    assert message.startswith("follow-up turn (history without reasoning_content, as openai-agents and LangChain")
    assert "reasoning_content is missing in assistant tool call message at index 1" in message
