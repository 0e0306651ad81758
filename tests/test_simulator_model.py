"""The scripted Kimi-K2.5 stand-in (pure Python): what text it "generates" for a request. No sglang needed."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from kimi_serve.simulator.model import SECTION_BEGIN, THINK_END, Turn, generate

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "unit", "days"],
        },
    },
}
GLOB = {
    "type": "function",
    "function": {
        "name": "glob",
        "description": "Find files matching a glob pattern",
        "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}}, "required": ["pattern"]},
    },
}
WRITE = {
    "type": "function",
    "function": {
        "name": "write_file",
        "description": "Write content to a file",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "content": {"type": "string", "minLength": 1},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                "options": {
                    "type": "object",
                    "properties": {"overwrite": {"type": "boolean"}},
                    "required": ["overwrite"],
                },
            },
            "required": ["path", "content", "tags", "options"],
        },
    },
}
TOOLS = [GLOB, WEATHER, WRITE]
CALL = re.compile(
    r"<\|tool_call_begin\|>functions\.([\w.-]+):(\d+)<\|tool_call_argument_begin\|>(.*?)<\|tool_call_end\|>", re.S
)


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def calls(text: str) -> list[tuple[str, int, dict]]:
    return [(name, int(idx), json.loads(args)) for name, idx, args in CALL.findall(text)]


def schema_of(name: str) -> dict:
    return next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name)


@pytest.mark.parametrize(
    "prompt, expected",
    [
        ("What's the weather in Paris in fahrenheit?", ["get_weather"]),
        ('List the files matching "*.py"', ["glob"]),
        ("Write a file notes.txt with a short note", ["write_file"]),
    ],
)
def test_tool_prompt_calls_the_matching_tool_with_schema_valid_arguments(prompt: str, expected: list[str]) -> None:
    text = generate(Turn(user(prompt), TOOLS))
    reasoning, _, rest = text.partition(THINK_END)
    assert reasoning and rest.startswith(SECTION_BEGIN) and rest.endswith("<|tool_calls_section_end|>")
    found = calls(text)
    assert [name for name, _, _ in found] == expected
    for name, _, args in found:
        jsonschema.validate(args, schema_of(name))


def test_arguments_take_values_from_the_prompt() -> None:
    ((_, _, args),) = calls(generate(Turn(user("What's the weather in Paris in fahrenheit for 3 days?"), TOOLS)))
    assert args == {"city": "Paris", "unit": "fahrenheit", "days": 3}


def test_several_calls_when_asked_for_several() -> None:
    found = calls(generate(Turn(user("Get the weather for two cities: Paris and London"), TOOLS)))
    assert [(n, i, a["city"]) for n, i, a in found] == [("get_weather", 0, "Paris"), ("get_weather", 1, "London")]
    mixed = calls(generate(Turn(user('List the files matching "*.md" and get the weather in Tokyo'), TOOLS)))
    assert [(n, a.get("pattern", a.get("city"))) for n, _, a in mixed] == [("glob", "*.md"), ("get_weather", "Tokyo")]


def test_call_ids_continue_after_calls_in_the_history() -> None:
    history = user("hi") + [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "functions.glob:0", "type": "function", "function": {"name": "glob", "arguments": "{}"}}
            ],
        },
        {"role": "user", "content": "Now the weather in Rome"},
    ]
    assert [i for _, i, _ in calls(generate(Turn(history, TOOLS)))] == [1]


def test_long_argument_when_the_prompt_asks_for_one() -> None:
    ((_, _, args),) = calls(
        generate(Turn(user("Write a file notes.txt with at least 1500 characters of content"), TOOLS))
    )
    assert args["path"] == "notes.txt" and len(args["content"]) >= 1500
    ((_, _, seq),) = calls(generate(Turn(user("Call write_file with as content every integer from 1 to 300"), TOOLS)))
    assert seq["content"].split() == [str(i) for i in range(1, 301)]


def test_no_tools_reasons_then_answers() -> None:
    reasoning, sep, answer = generate(Turn(user("What is 2+2?"), [])).partition(THINK_END)
    assert reasoning and sep and answer and "<|" not in answer


def test_thinking_off_has_no_reasoning_and_no_think_tag() -> None:
    assert THINK_END not in generate(Turn(user("What is 2+2?"), [], thinking=False))
    text = generate(Turn(user("Weather in Oslo?"), TOOLS, thinking=False))
    assert THINK_END not in text and text.index(SECTION_BEGIN) > 0


def test_tool_result_turn_gets_a_final_answer_using_the_result() -> None:
    convo = user("Weather in Paris?") + [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "functions.get_weather:0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "sunny, 18 C"},
    ]
    reasoning, _, answer = generate(Turn(convo, TOOLS)).partition(THINK_END)
    assert reasoning and "sunny, 18 C" in answer and SECTION_BEGIN not in answer


def test_tool_choice_none_and_named() -> None:
    assert SECTION_BEGIN not in generate(Turn(user("Weather in Paris?"), TOOLS, tool_choice="none"))
    named = {"type": "function", "function": {"name": "glob"}}
    assert [n for n, _, _ in calls(generate(Turn(user("Weather in Paris?"), TOOLS, tool_choice=named)))] == ["glob"]


def test_deterministic() -> None:
    turn = Turn(user("Get the weather for both Paris and Rome"), TOOLS)
    assert generate(turn) == generate(turn)
