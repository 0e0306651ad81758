"""Kimi's raw format without a server: verify's own template rendering (held against the simulator's Jinja template),
the raw-answer rules, the rebuild + difference report, and the simulator reading its prompt back."""

from __future__ import annotations

import json
import re
from typing import Any

import jinja2
import pytest

from kimi_serve.simulator.prompt import read_prompt
from kimi_serve.simulator.stand_in import CHAT_TEMPLATE
from kimi_serve.verify import kimi_format as kf
from kimi_serve.verify.lossless import compare, reasoning_fields
from kimi_serve.verify.probes import FULL, WEATHER_TOOLS
from kimi_serve.verify.raw import RAW_PROBES, check_raw

# its servers (or the code under test's port probes) bind loopback sockets: the listener tier
pytestmark = pytest.mark.usefixtures("loopback_port")

RAW_TOOL = (
    "Let me look.</think><|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>'
)


def _jinja(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, **kwargs: Any) -> str:
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda v, separators=None: json.dumps(v, separators=separators)
    return env.from_string(CHAT_TEMPLATE.read_text()).render(
        messages=messages, tools=tools, add_generation_prompt=True, **kwargs
    )


def test_user_only_prompt_is_the_documented_string() -> None:
    assert kf.render_prompt([{"role": "user", "content": "hi"}]) == (
        "<|im_user|>user<|im_middle|>hi<|im_end|><|im_assistant|>assistant<|im_middle|><think>"
    )
    assert kf.render_prompt([{"role": "user", "content": "hi"}], thinking=False).endswith("<think></think>")


@pytest.mark.parametrize("probe", FULL, ids=lambda p: p.name)
def test_rendering_matches_the_k25_style_template_for_every_probe(probe: Any) -> None:
    kwargs = {"thinking": False} if (probe.template_kwargs or {}).get("thinking") is False else {}
    tools = list(probe.tools) or None
    assert kf.render_prompt(probe.messages, tools, **kwargs) == _jinja(probe.messages, tools, **kwargs)


def _answer(text: str, ids: list[int] | None = None, finish: Any = None) -> dict[str, Any]:
    ids = ids if ids is not None else [1, kf.THINK_END_ID, kf.SECTION_BEGIN_ID, 2, kf.IM_END_ID]
    return {
        "text": text,
        "output_ids": ids,
        "meta_info": {
            "finish_reason": finish or {"type": "stop", "matched": kf.IM_END_ID},
            "prompt_tokens": 40,
            "completion_tokens": len(ids),
        },
    }


def test_a_well_formed_raw_tool_answer_holds() -> None:
    assert check_raw(_answer(RAW_TOOL), RAW_PROBES[1]) == []


def test_stripped_specials_missing_ids_and_bad_meta_are_named() -> None:
    stripped = RAW_TOOL.replace("</think>", "")
    assert {f.code for f in check_raw(_answer(stripped), RAW_PROBES[1])} >= {"raw_special_stripped"}
    split = check_raw(_answer(RAW_TOOL, ids=[1, 2, kf.SECTION_BEGIN_ID, kf.IM_END_ID]), RAW_PROBES[1])
    assert "raw_think_not_one_id" in {f.code for f in split}
    assert check_raw({"text": RAW_TOOL, "meta_info": {}}, RAW_PROBES[1])[0].code == "raw_no_output_ids"
    wrong_stop = check_raw(_answer(RAW_TOOL, finish={"type": "stop", "matched": 2}), RAW_PROBES[1])
    assert [f.code for f in wrong_stop] == ["raw_matched_stop"]
    bad_json = RAW_TOOL.replace('{"city": "Paris"}', '{"city": Paris}')
    assert "raw_arguments_json" in {f.code for f in check_raw(_answer(bad_json), RAW_PROBES[1])}
    unknown = RAW_TOOL.replace("functions.get_weather:0", "functions.launch:0")
    assert "raw_call_id" in {f.code for f in check_raw(_answer(unknown), RAW_PROBES[1])}


def test_reasoning_answer_needs_reasoning_and_content() -> None:
    ids = [1, kf.THINK_END_ID, 2, kf.IM_END_ID]
    assert check_raw(_answer("Think.</think>391", ids), RAW_PROBES[0]) == []
    assert [f.code for f in check_raw(_answer("</think>391", ids), RAW_PROBES[0])] == ["raw_empty_reasoning"]
    assert [f.code for f in check_raw(_answer("Think.</think>", ids), RAW_PROBES[0])] == ["raw_empty_content"]


def _chat(message: dict[str, Any], ids: list[int] | None = None) -> dict[str, Any]:
    return {"choices": [{"message": message}], **({"sglext": {"output_ids": [ids]}} if ids else {})}


def test_rebuild_reproduces_the_raw_text_and_reports_differences() -> None:
    calls = [{"id": "functions.get_weather:0", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]
    message = {"content": "", "reasoning_content": "Let me look.", "tool_calls": calls}
    raw = {"text": RAW_TOOL, "output_ids": [1, 2, 3]}
    assert compare(_chat(message, [1, 2, 3]), raw, thinking=True, exact_prompt=True) == []
    unparsed = {"content": RAW_TOOL, "reasoning_content": None}
    assert compare(_chat(unparsed), raw, thinking=True, exact_prompt=False) == []  # no parsers: content is raw
    lossy = {**message, "reasoning_content": "Let me look. "}
    found = compare(_chat(lossy, [1, 2, 3]), raw, thinking=True, exact_prompt=True)
    assert found[0].code == "lossless_mismatch" and "character 12 of" in found[0].message
    assert "whitespace only" in found[0].message
    drift = compare(_chat(message, [1, 9, 3]), raw, thinking=True, exact_prompt=True)
    assert drift[0].code == "lossless_nondeterministic" and "from token 1" in drift[0].message


def test_reasoning_field_line_names_what_clients_read() -> None:
    assert "model_extra['reasoning_content']" in reasoning_fields({"reasoning_content": "x", "content": "y"})
    assert "message.reasoning only" in reasoning_fields({"reasoning": "x"})
    assert "both" in reasoning_fields({"reasoning": "x", "reasoning_content": "x"})
    assert "inside content" in reasoning_fields({"content": "think</think>answer", "reasoning_content": None})


def test_the_simulator_reads_a_rendered_prompt_back() -> None:
    probe = next(p for p in FULL if p.name == "tool-result")
    messages, tools = read_prompt(kf.render_prompt(probe.messages, list(probe.tools)))
    assert [t["function"]["name"] for t in tools] == [t["function"]["name"] for t in WEATHER_TOOLS]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[1]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert messages[2]["tool_call_id"] == "functions.get_weather:0"
    assert read_prompt("plain words") == ([{"role": "user", "content": "plain words"}], [])


def test_the_simulator_reads_kimis_typescript_declarations() -> None:
    ts = (
        "# Tools\n\n## functions\nnamespace functions {\n// Current weather for a city.\n"
        'type get_weather = (_: {\n// City name\n  city: string,\n  unit?: "celsius" | "fahrenheit"\n'
        "}) => any;\n}\n"
    )
    text = f"<|im_system|>tool_declare<|im_middle|>{ts}<|im_end|><|im_user|>user<|im_middle|>hi<|im_end|>"
    _, tools = read_prompt(text)
    fn = tools[0]["function"]
    assert fn["name"] == "get_weather" and fn["description"] == "Current weather for a city."
    assert fn["parameters"]["required"] == ["city"]
    assert fn["parameters"]["properties"]["unit"] == {"type": "string", "enum": ["celsius", "fahrenheit"]}


def test_cli_suite_raw_and_full_print_the_raw_path(cli: Any) -> None:
    from contract_server import ContractServer

    with ContractServer("no-parsers") as srv:  # the raw path holds where the parsed one is broken
        raw = cli("verify", "--host", srv.host, "--suite", "raw")
        full = cli("verify", "--host", srv.host, "--suite", "full", "--json")
    assert raw.code == 0, raw.out + raw.err
    assert "raw-reasoning" in raw.out and "raw-tool" in raw.out and "verify: contract holds: 2 passed (" in raw.out
    report = json.loads(full.out)
    lossless = {p["probe"]: p for p in report["probes"] if p["mode"] == "chat+generate"}
    assert full.code == 1 and report["suite"] == "full"
    assert lossless["lossless-reasoning"]["status"] == "pass"  # no parser: content carries the raw text
    assert "no reasoning field" in lossless["lossless-reasoning"]["detail"]


# /generate answers whose fields are null, missing or of another JSON type: each fails the raw suite somewhere
_NULLISH: list[Any] = [
    None,
    [_answer(RAW_TOOL)],
    {"text": RAW_TOOL, "output_ids": None, "meta_info": {}},
    {"text": RAW_TOOL, "meta_info": {"finish_reason": None, "prompt_tokens": None}},
    _answer(RAW_TOOL, finish={"type": "stop", "matched": None}),
    _answer(RAW_TOOL, finish={"type": "stop"}),
    _answer(RAW_TOOL, finish={"type": "stop", "matched": True}),
    {**_answer(RAW_TOOL), "meta_info": {"finish_reason": {"type": "stop", "matched": kf.IM_END_ID}}},
    {**_answer(RAW_TOOL), "meta_info": {"finish_reason": None, "prompt_tokens": False, "completion_tokens": "7"}},
    _answer(RAW_TOOL.replace('{"city": "Paris"}', "null")),
    _answer(RAW_TOOL.replace('{"city": "Paris"}', "[true, null]")),
    _answer(RAW_TOOL.replace("functions.get_weather:0", "")),
]
_PYTHON_WORDS = re.compile(r"\b(None|NoneType|True|False|dict|list|str|int)\b")


@pytest.mark.parametrize("probe", RAW_PROBES, ids=lambda p: p.name)
def test_the_raw_suites_findings_word_nulls_as_json_never_as_python(probe: Any) -> None:
    """Every raw finding message and fix, on answers with nulls, missing keys and wrong types: JSON words (null,
    true, "stop", an object), never Python's None, True or a type name."""
    found = [f for data in _NULLISH for f in check_raw(data, probe)]
    assert len(found) >= len(_NULLISH)  # each answer fails
    said = [f"{f.message} (fix: {f.fix})" for f in found]
    assert [s for s in said if _PYTHON_WORDS.search(s)] == []
    text = "\n".join(said)
    assert "finish_reason.matched is null (no matched stop), not the model's stop id" in text
    assert "finish_reason.matched is true, not the model's stop id" in text
    assert "meta_info.completion_tokens is null (missing), not a positive count" in text
    assert 'meta_info.completion_tokens is "7", not a positive count' in text
    assert "the /generate answer has no output_ids (it is null (missing))" in text
    assert "/generate answered a JSON null, not an object" in text and "answered a JSON array" in text
    if probe is RAW_PROBES[1]:
        assert "tool call 0 arguments are a JSON null, not an object" in text
        assert "arguments are a JSON array, not an object" in text


def test_the_chat_paths_findings_word_a_null_finish_reason_and_name_as_json() -> None:
    """Its kin on the chat path (verify/diagnose.py, verify/tool_findings.py): a null finish_reason, tool-call type
    and name."""
    from kimi_serve.verify import diagnose, tool_findings
    from kimi_serve.verify.answer import Answer, ToolCall

    empty = diagnose.final_answer_findings(Answer(finish_reason=None), after="after the tool result")
    nameless = tool_findings.call_findings(ToolCall(id="x", arguments="[]"), 0, {"get_weather": {}})
    said = [f"{f.message} (fix: {f.fix})" for f in empty + nameless]
    assert [s for s in said if _PYTHON_WORDS.search(s)] == [], said
    text = "\n".join(said)
    assert "empty content after the tool result (finish_reason null)" in text
    assert 'tool call #0 has type null, expected "function"' in text and "names function null" in text
