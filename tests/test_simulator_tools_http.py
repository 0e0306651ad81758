"""Schema-complete tool arguments and the model-like tool decision over real HTTP: the simulator (SGLang 0.5.23's own
OpenAI serving layer and kimi_k2 parsers in the CPU SGLang venv) driven by the official `openai` client, streamed and
not. Every returned argument string is validated against the offered schema with jsonschema (formats asserted)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
from sim_pool import PARSED_TP8, SHARED_KEY, SHARED_MODEL, SimulatorPool

FLAGS, KEY, MODEL = PARSED_TP8, SHARED_KEY, SHARED_MODEL  # the pool's standard server
ASK = "Call the submit tool exactly once with arguments that satisfy its parameter schema."
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
WRITE = {
    "type": "function",
    "function": {
        "name": "write_file",
        "description": "Write content to a file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    },
}
MODES = ["non-stream", "stream"]


@pytest.fixture(scope="module")
def client(simulator_pool: SimulatorPool) -> openai.OpenAI:
    sim = simulator_pool.get(FLAGS, key=KEY)
    return openai.OpenAI(base_url=sim.base_url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def ask(
    client: openai.OpenAI, mode: str, prompt: str, tools: list[dict[str, Any]], tool_choice: Any = "auto"
) -> tuple[list[tuple[str, str]], str, str | None]:
    """(calls as (name, arguments string), content, finish_reason), stream chunks merged by index."""
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "tools": tools,
        "tool_choice": tool_choice,
        "max_tokens": 4096,
    }
    if mode == "non-stream":
        choice = client.chat.completions.create(**body).choices[0]
        found = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
        return found, choice.message.content or "", choice.finish_reason
    merged: dict[int, list[str]] = {}
    content, finish = "", None
    for chunk in client.chat.completions.create(**body, stream=True):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        finish = chunk.choices[0].finish_reason or finish
        content += delta.content or ""
        for tc in delta.tool_calls or []:
            entry = merged.setdefault(tc.index, ["", ""])
            entry[0] += (tc.function.name or "") if tc.function else ""
            entry[1] += (tc.function.arguments or "") if tc.function else ""
    return [(n, a) for n, a in (merged[i] for i in sorted(merged))], content, finish


def submit(client: openai.OpenAI, mode: str, schema: dict[str, Any], prompt: str = ASK) -> Any:
    tools = [
        {"type": "function", "function": {"name": "submit", "description": "Submit arguments", "parameters": schema}}
    ]
    found, _, finish = ask(client, mode, prompt, tools)
    assert [n for n, _ in found] == ["submit"] and finish == "tool_calls"
    args = json.loads(found[0][1])
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls(schema, format_checker=cls.FORMAT_CHECKER).validate(args)
    return args


def wrapped(value: dict[str, Any], defs: dict[str, Any] | None = None) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"value": value}, "required": ["value"], "additionalProperties": False}
    return {**schema, "$defs": defs} if defs else schema


@pytest.mark.parametrize("mode", MODES)
def test_refs_and_defs(client: openai.OpenAI, mode: str) -> None:
    defs = {
        "step": {
            "type": "object",
            "additionalProperties": False,
            "required": ["explanation", "output"],
            "properties": {"explanation": {"type": "string"}, "output": {"$ref": "#/$defs/out"}},
        },
        "out": {"$ref": "#/$defs/num", "description": "a chain"},
        "num": {"type": "number", "minimum": 2},
        "node": {
            "type": "object",
            "required": ["next"],
            "properties": {"next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
        },
    }
    schema = {
        "type": "object",
        "$defs": defs,
        "required": ["steps", "list"],
        "additionalProperties": False,
        "properties": {
            "steps": {"type": "array", "items": {"$ref": "#/$defs/step"}, "minItems": 1},
            "list": {"$ref": "#/$defs/node"},
        },
    }
    args = submit(client, mode, schema)
    assert args["steps"][0]["output"] >= 2


@pytest.mark.parametrize("mode", MODES)
def test_pattern_formats_and_bounds(client: openai.OpenAI, mode: str) -> None:
    schema = {
        "type": "object",
        "required": ["slug", "phone", "day", "mail", "id", "ip", "n"],
        "properties": {
            "slug": {"type": "string", "pattern": "^[a-z]+$"},
            "phone": {"type": "string", "pattern": r"^\d{3}-\d{4}$"},
            "day": {"type": "string", "format": "date"},
            "mail": {"type": "string", "format": "email"},
            "id": {"type": "string", "format": "uuid"},
            "ip": {"type": "string", "format": "ipv4"},
            "n": {"type": "integer", "exclusiveMinimum": 10, "multipleOf": 7},
        },
    }
    args = submit(client, mode, schema)
    assert re.fullmatch(r"[a-z]+", args["slug"]) and args["n"] == 14


@pytest.mark.parametrize("mode", MODES)
def test_unique_items_min_properties_and_null_types(client: openai.OpenAI, mode: str) -> None:
    schema = {
        "type": "object",
        "required": ["tags", "extra", "nothing", "maybe"],
        "properties": {
            "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 3, "uniqueItems": True},
            "extra": {"type": "object", "minProperties": 2, "additionalProperties": {"type": "integer"}},
            "nothing": {"type": ["null"]},
            "maybe": {"type": ["string", "null"]},
        },
    }
    args = submit(client, mode, schema)
    assert sorted(args["tags"]) == ["a", "b", "c"] and len(args["extra"]) == 2
    assert args["nothing"] is None and isinstance(args["maybe"], str)


@pytest.mark.parametrize("mode", MODES)
def test_non_latin_values_come_back_as_written(client: openai.OpenAI, mode: str) -> None:
    found, _, _ = ask(client, mode, "北京今天天气怎么样？请查一下，你应当使用工具。", [WEATHER])
    assert [(n, json.loads(a)) for n, a in found] == [("get_weather", {"city": "北京"})]


@pytest.mark.parametrize("mode", MODES)
def test_auto_answers_without_a_call_when_the_prompt_declines_tools(client: openai.OpenAI, mode: str) -> None:
    for prompt in (
        "你好，请简单介绍一下你自己。你不应使用任何工具。",
        "What is the weather in Paris? Do not use any tools.",
    ):
        found, content, finish = ask(client, mode, prompt, [WEATHER])
        assert found == [] and content and finish == "stop"
    found, _, finish = ask(client, mode, "What is the weather in Paris? Do not use any tools.", [WEATHER], "required")
    assert [n for n, _ in found] == ["get_weather"] and finish == "tool_calls"  # required still forces one


READ = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file from the workspace",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}


@pytest.mark.parametrize("mode", MODES)
def test_auto_calls_for_a_natural_agentic_request_and_answers_knowledge(client: openai.OpenAI, mode: str) -> None:
    """No word of the tool's name or description in the prompt: the request is a task the tool performs."""
    found, _, finish = ask(client, mode, "Open config/settings.yaml and tell me which port it uses.", [READ, WRITE])
    assert [(n, json.loads(a)) for n, a in found] == [("read_file", {"path": "config/settings.yaml"})]
    assert finish == "tool_calls"
    found, _, finish = ask(client, mode, "Is it raining in Oslo right now?", [READ, WEATHER])
    assert [(n, json.loads(a)) for n, a in found] == [("get_weather", {"city": "Oslo"})]
    found, content, finish = ask(client, mode, "Explain how weather forecasts work.", [READ, WEATHER])
    assert found == [] and content and finish == "stop"


@pytest.mark.parametrize("mode", MODES)
def test_at_least_two_in_a_value_is_one_call(client: openai.OpenAI, mode: str) -> None:
    found, _, _ = ask(
        client, mode, 'Write notes.txt with the content "we need at least two reviewers"', [WEATHER, WRITE]
    )
    assert [(n, json.loads(a)) for n, a in found] == [
        ("write_file", {"path": "notes.txt", "content": "we need at least two reviewers"})
    ]


@pytest.mark.parametrize("mode", MODES)
def test_parallel_calls_when_asked_with_their_own_values(client: openai.OpenAI, mode: str) -> None:
    found, _, finish = ask(client, mode, "Get the weather for two cities: Paris and London", [WEATHER])
    assert [(n, json.loads(a)) for n, a in found] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "London"}),
    ]
    assert finish == "tool_calls"


def test_json_object_answer_keeps_the_keys_the_prompt_names(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model=MODEL,
        response_format={"type": "json_object"},
        messages=[
            {
                "role": "user",
                "content": "Return the weather of Beijing as JSON. The response must contain a key named 'city'.",
            }
        ],
    )
    assert (
        json.loads(r.choices[0].message.content or "") == {"city": "Beijing"} and r.choices[0].finish_reason == "stop"
    )


@pytest.mark.parametrize("mode", MODES)
def test_required_call_with_emoji_property_names(client: openai.OpenAI, mode: str) -> None:
    # under tool_choice required the call goes through SGLang's grammar; the grammar's forced continuation may end
    # inside a multi-byte character, which must not fail the request
    schema = wrapped(
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["🧑🏾‍🤝‍🧑🏾", "abc😊"],
            "properties": {"🧑🏾‍🤝‍🧑🏾": {"type": "string"}, "abc😊": {"type": "string"}},
        }
    )
    tools = [{"type": "function", "function": {"name": "submit", "parameters": schema, "strict": True}}]
    found, _, finish = ask(client, mode, ASK, tools, "required")
    assert [n for n, _ in found] == ["submit"] and finish == "tool_calls"
    jsonschema.validate(json.loads(found[0][1]), schema)


CLIENTS = Path(__file__).parent / "clients"


def test_prompt_tokens_of_the_clients_real_prompts_near_kimis_count(client: openai.OpenAI) -> None:
    """usage.prompt_tokens of kimi-cli's and opencode's real requests (tool schemas: English descriptions in JSON) at
    3.5-4.5 characters per token, where Kimi's tokenizer counts ~3.8 (kimi-cli's own estimate); the old 697-token
    stand-in counted ~1.7, twice a real server's, and context limits, budgets and usage inherited it."""
    kimi_cli = json.loads((CLIENTS / "kimi_cli_request.json").read_text())
    opencode = json.loads((CLIENTS / "opencode_tools.json").read_text())["tools"]
    listing = [{"role": "user", "content": "List the files in this directory"}]
    for messages, tools in ((kimi_cli["messages"], kimi_cli["tools"]), (listing, opencode)):
        r = client.chat.completions.create(model=MODEL, messages=messages, tools=tools, max_tokens=1)
        chars = len(json.dumps(tools, separators=(",", ":"))) + sum(len(m["content"]) for m in messages)
        assert r.usage is not None and 3.5 <= chars / r.usage.prompt_tokens <= 4.5, (chars, r.usage)
