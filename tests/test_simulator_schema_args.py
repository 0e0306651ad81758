"""The scripted model's tool arguments (schema_values.py, schema_strings.py, regex_example.py) and tool decision
(decision.py), pure Python: every argument validates against the offered schema with jsonschema, values come from the
prompt in any script, and the model calls, declines and parallelises the way the docs say. The same behaviours over
real HTTP through SGLang's serving layer: tests/test_simulator_tools_http.py."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import jsonschema
import pytest

from kimi_serve.simulator.model import SECTION_BEGIN, THINK_END, Turn, generate
from kimi_serve.simulator.regex_example import example

CALL = re.compile(
    r"<\|tool_call_begin\|>functions\.([\w.-]+):(\d+)<\|tool_call_argument_begin\|>(.*?)<\|tool_call_end\|>", re.S
)
ASK = "Call the submit tool exactly once with arguments that satisfy its parameter schema."


def tool(name: str, parameters: dict[str, Any], description: str = "Submit arguments") -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


WEATHER = tool(
    "get_weather",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "Get the weather of a city.",
)
WRITE = tool(
    "write_file",
    {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    },
    "Write content to a file",
)


def calls(prompt: str, tools: list[dict[str, Any]], tool_choice: Any = "auto") -> list[tuple[str, dict[str, Any]]]:
    text = generate(Turn([{"role": "user", "content": prompt}], tools, tool_choice))
    return [(name, json.loads(args)) for name, _, args in CALL.findall(text)]


def args_for(schema: dict[str, Any], prompt: str = ASK) -> Any:
    ((name, args),) = calls(prompt, [tool("submit", schema)], "required")
    assert name == "submit"
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls(schema, format_checker=cls.FORMAT_CHECKER).validate(args)  # formats asserted too, not just annotations
    return args


def wrapped(value: dict[str, Any], defs: dict[str, Any] | None = None) -> dict[str, Any]:
    """A schema as one required argument "value" (the shape Moonshot's verifier sends)."""
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"value": value},
        "required": ["value"],
        "additionalProperties": False,
    }
    return {**schema, "$defs": defs} if defs else schema


# -- refs and defs ----------------------------------------------------------------------------------------------------


def test_refs_into_defs_nested_defs_and_ref_chains_resolve_to_real_values() -> None:
    defs = {
        "addr": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"$ref": "#/$defs/zip"}},
            "required": ["city", "zip"],
        },
        "zip": {"$ref": "#/$defs/digits", "description": "a ref with siblings"},
        "digits": {"type": "string", "pattern": "^[0-9]{5}$"},
        "person": {
            "type": "object",
            "properties": {
                "home": {"$ref": "#/$defs/addr"},
                "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}, "minItems": 2},
            },
            "required": ["home", "tags"],
        },
        "tag": {"enum": ["red", "green"]},
    }
    args = args_for(wrapped({"$ref": "#/$defs/person"}, defs))
    assert re.fullmatch(r"[0-9]{5}", args["value"]["home"]["zip"]) and len(args["value"]["tags"]) == 2
    pointer = args_for(
        wrapped(
            {"$ref": "#/$defs/group/items"},
            {
                "group": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"data": {"type": "integer"}}, "required": ["data"]},
                }
            },
        )
    )
    assert isinstance(pointer["value"]["data"], int)


def test_recursive_refs_end() -> None:
    node = {
        "type": "object",
        "additionalProperties": False,
        "required": ["value", "next"],
        "properties": {"value": {"type": "number"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
    }
    args = args_for(wrapped({"$ref": "#/$defs/node"}, {"node": node}))
    depth, cur = 0, args["value"]
    while cur is not None:
        depth, cur = depth + 1, cur["next"]
    assert 1 <= depth <= 6
    tree = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}}},
        "required": ["name", "children"],
    }
    args_for(tree)  # "$ref": "#" at the root


def test_allof_merges_and_oneof_picks_exactly_one_branch() -> None:
    args = args_for(
        {
            "type": "object",
            "required": ["a", "b"],
            "properties": {
                "a": {"allOf": [{"type": "integer", "minimum": 5}, {"maximum": 9, "multipleOf": 3}]},
                "b": {"oneOf": [{"type": "number"}, {"type": "integer"}]},
            },
        }
    )
    assert args["a"] in (6, 9) and not float(args["b"]).is_integer()


# -- strings: pattern, format, lengths ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pattern",
    [
        r"^[a-z]+$",
        r"^\d{3}-\d{4}$",
        r"^(foo|bar)_[A-Z]{2,}$",
        r"^#[0-9a-fA-F]{6}$",
        r"^[\u4e00-\u9fff]{2}$",
        r"^(ab)+\1$",
        r"^\w+@\w+\.com$",
        r"[^abc]x",
    ],
)
def test_pattern_strings_match(pattern: str) -> None:
    args = args_for(wrapped({"type": "string", "pattern": pattern}))
    assert re.search(pattern, args["value"])


def test_pattern_with_lengths_and_the_regex_generator_directly() -> None:
    args = args_for(wrapped({"type": "string", "pattern": "^[a-z]+$", "minLength": 12, "maxLength": 14}))
    assert 12 <= len(args["value"]) <= 14
    assert example(r"(?=a)\w$") is None  # a lookahead the generator does not satisfy: None, never a wrong string
    assert example("[") is None


@pytest.mark.parametrize(
    "fmt",
    [
        "date",
        "date-time",
        "time",
        "email",
        "uri",
        "uuid",
        "ipv4",
        "ipv6",
        "hostname",
        "json-pointer",
        "regex",
        "duration",
    ],
)
def test_formats_are_valid_for_the_format(fmt: str) -> None:
    args_for(wrapped({"type": "string", "format": fmt}))  # args_for asserts formats with the format checker


def test_string_lengths() -> None:
    args = args_for(wrapped({"type": "string", "minLength": 300, "maxLength": 320}))
    assert 300 <= len(args["value"]) <= 320
    assert args_for(wrapped({"type": "string", "maxLength": 0}))["value"] == ""


# -- numbers ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "exclusiveMinimum": 10, "exclusiveMaximum": 12},
        {"type": "number", "minimum": 0.5, "maximum": 0.75},
        {"type": "integer", "minimum": 7, "multipleOf": 5},
        {"type": "number", "multipleOf": 0.25, "minimum": 3.1},
        {"type": "integer", "maximum": -40},
        {"type": "number", "minimum": 5, "exclusiveMinimum": True},  # draft 4's boolean form
    ],
)
def test_numeric_bounds_and_multiples(schema: dict[str, Any]) -> None:
    args_for(
        wrapped(schema)
        if "exclusiveMinimum" not in schema or schema["exclusiveMinimum"] is not True
        else {"$schema": "http://json-schema.org/draft-04/schema#", **wrapped(schema)}
    )


# -- arrays and objects ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "items",
    [
        {"type": "string"},
        {"type": "integer", "minimum": 1, "maximum": 9},
        {"enum": ["a", "b", "c", "d"]},
        {"type": "string", "format": "date"},
        {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
    ],
)
def test_unique_items(items: dict[str, Any]) -> None:
    args = args_for(wrapped({"type": "array", "items": items, "minItems": 4, "uniqueItems": True}))
    assert len(args["value"]) == 4


def test_min_and_max_items_prefix_items_and_contains() -> None:
    assert args_for(wrapped({"type": "array", "items": {"type": "string"}, "maxItems": 0}))["value"] == []
    args = args_for(
        wrapped(
            {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "boolean"}], "minItems": 2, "items": False}
        )
    )
    assert [type(v) for v in args["value"]] == [int, bool]
    args_for(wrapped({"type": "array", "contains": {"const": "needle"}, "items": {"type": "string"}}))


def test_min_properties_fill_from_declared_then_additional_properties() -> None:
    declared = args_for(
        wrapped(
            {
                "type": "object",
                "properties": {"a": {"type": "string"}, "b": {"type": "integer"}, "c": {"type": "boolean"}},
                "minProperties": 3,
            }
        )
    )
    assert set(declared["value"]) == {"a", "b", "c"}
    extra = args_for(wrapped({"type": "object", "minProperties": 2, "additionalProperties": {"type": "integer"}}))
    assert len(extra["value"]) == 2 and all(isinstance(v, int) for v in extra["value"].values())
    named = args_for(
        wrapped(
            {
                "type": "object",
                "minProperties": 2,
                "patternProperties": {"^x_[a-z]+$": {"type": "string"}},
                "additionalProperties": False,
            }
        )
    )
    assert len(named["value"]) == 2
    args_for(wrapped({"type": "object", "minProperties": 1, "propertyNames": {"pattern": "^[A-Z]{3}$"}}))
    capped = args_for(wrapped({"type": "object", "properties": {"a": {"type": "string"}}, "maxProperties": 0}))
    assert capped["value"] == {}


# -- types, null, const, enum -----------------------------------------------------------------------------------------


def test_null_types_and_type_arrays() -> None:
    assert args_for(wrapped({"type": ["null"]}))["value"] is None
    assert args_for(wrapped({"type": "null"}))["value"] is None
    assert isinstance(args_for(wrapped({"type": ["string", "null"]}))["value"], str)
    assert isinstance(args_for(wrapped({"type": ["null", "integer"]}))["value"], int)
    assert args_for(wrapped({"anyOf": [{"type": "null"}, {"type": "boolean"}]}))["value"] is True


def test_const_and_enum() -> None:
    assert args_for(wrapped({"const": {"k": [1, 2]}}))["value"] == {"k": [1, 2]}
    assert args_for(wrapped({"type": "string", "enum": [1, "x"]}))["value"] == "x"  # the enum member the type allows
    assert args_for(wrapped({"enum": ["fast", "slow"]}), ASK + " Make it slow.")["value"] == "slow"


# -- values from the prompt in any script ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prompt, city",
    [
        ("北京今天天气怎么样？请查一下，你应当使用工具。", "北京"),
        ("请查一下上海的天气。", "上海"),
        ("Какая погода сейчас в городе Москва?", "Москва"),
        ("What is the weather in São Paulo?", "São"),
        ("Check the weather for 「東京」 please", "東京"),
    ],
)
def test_non_latin_values_come_from_the_prompt(prompt: str, city: str) -> None:
    assert calls(prompt, [WEATHER]) == [("get_weather", {"city": city})]


def test_enum_mentioned_in_chinese() -> None:
    schema = {"type": "object", "properties": {"unit": {"enum": ["摄氏", "华氏"]}}, "required": ["unit"]}
    assert calls("用华氏度告诉我温度，使用工具", [tool("temperature", schema)]) == [("temperature", {"unit": "华氏"})]


# -- the tool decision -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prompt",
    [
        "What's the weather in Paris? Do not use any tools.",
        "Without calling tools, what is the weather in Paris?",
        "Don't call any functions; just answer: weather in Paris?",
        "Weather in Paris? Just answer from memory.",
        "你好，请简单介绍一下你自己。你不应使用任何工具。",
        "请不要调用工具，直接回答北京的天气。",
    ],
)
def test_auto_does_not_call_when_the_prompt_declines_tools(prompt: str) -> None:
    text = generate(Turn([{"role": "user", "content": prompt}], [WEATHER], "auto"))
    assert SECTION_BEGIN not in text and text.partition(THINK_END)[2].strip()


def test_auto_does_not_call_when_no_tool_fits_but_required_and_named_do() -> None:
    for prompt in ("Tell me a joke about cats.", "你好，请简单介绍一下你自己。"):
        assert calls(prompt, [WEATHER]) == []
        assert [n for n, _ in calls(prompt, [WEATHER], "required")] == ["get_weather"]
        assert [n for n, _ in calls(prompt, [WEATHER], {"type": "function", "function": {"name": "get_weather"}})] == [
            "get_weather"
        ]
    assert calls("Do not use any tools. Weather in Paris?", [WEATHER], "required") == [
        ("get_weather", {"city": "Paris"})
    ]


@pytest.mark.parametrize(
    "prompt, content",
    [
        (
            'Write the file notes.txt with the content "we need at least two reviewers"',
            "we need at least two reviewers",
        ),
        ('Write notes.txt containing "both teams ship three releases"', "both teams ship three releases"),
        ("Write a file notes.txt saying we need at least two reviewers", None),
    ],
)
def test_counts_inside_values_do_not_add_calls(prompt: str, content: str | None) -> None:
    found = calls(prompt, [WEATHER, WRITE])
    assert [n for n, _ in found] == ["write_file"] and found[0][1]["path"] == "notes.txt"
    if content is not None:
        assert found[0][1]["content"] == content


@pytest.mark.parametrize(
    "prompt, cities",
    [
        ("What is the weather in Paris and in Tokyo? Call get_weather once for each city.", ["Paris", "Tokyo"]),
        ("Get the weather for two cities: Paris and London", ["Paris", "London"]),
        ("Weather in Oslo, Bergen and Trondheim?", ["Oslo", "Bergen", "Trondheim"]),
        ("请查一下北京和上海的天气。", ["北京", "上海"]),
        ("Check the weather in Rome twice", ["Rome", "Rome"]),
    ],
)
def test_parallel_calls_when_the_request_asks_for_several(prompt: str, cities: list[str]) -> None:
    assert calls(prompt, [WEATHER]) == [("get_weather", {"city": c}) for c in cities]


def test_one_call_when_asked_once_and_distinct_tools_get_their_own_values() -> None:
    assert len(calls("Call get_weather exactly once for Paris and London", [WEATHER])) == 1
    found = calls('Write notes.txt with "hello" and get the weather in Tokyo', [WEATHER, WRITE])
    assert found == [("write_file", {"path": "notes.txt", "content": "hello"}), ("get_weather", {"city": "Tokyo"})]


READ = tool(
    "read_file", {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}, "Read a file"
)


def test_agentic_prompts_one_tool_per_named_action_and_files_in_turn() -> None:
    tools = [READ, WRITE]
    assert calls('Read the file "service/handlers.py" and find where request ids are parsed.', tools) == [
        ("read_file", {"path": "service/handlers.py"})
    ]  # "file" is read_file's and write_file's: one tool named
    assert calls('Read both "service/config.py" and "service/client.py" so we can compare them.', tools) == [
        ("read_file", {"path": "service/config.py"}),
        ("read_file", {"path": "service/client.py"}),
    ]
    ((_, args),) = calls('Write the file "service/limits.py" with a rate limiter class', tools)
    assert args["path"] == "service/limits.py" and args["content"] != "service/limits.py"
    assert calls("Summarise the architecture of this service for a new contributor.", tools) == []


def test_forced_choice_includes_tools_declared_in_system_messages() -> None:
    messages = [
        {"role": "system", "content": "", "tools": [WEATHER]},
        {"role": "user", "content": "what is the weather in beijing?"},
    ]
    text = generate(Turn(messages, [], "required"))
    assert [n for n, _, _ in CALL.findall(text)] == ["get_weather"]  # SGLang's grammar would force one of them
    assert SECTION_BEGIN not in generate(Turn(messages, [], "auto"))  # K2.5's template never shows them the model


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "number", "multipleOf": "x"}}, "required": ["a"]},
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "(["}}, "required": ["a"]},
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "^a{1000000}$"}}, "required": ["a"]},
        {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}, "required": ["a"]},
        {
            "$defs": {"n": {"type": "object", "properties": {"c": {"$ref": "#/$defs/n"}}, "required": ["c"]}},
            "type": "object",
            "properties": {"r": {"$ref": "#/$defs/n"}},
            "required": ["r"],
        },  # no way out: bounded depth
        {"type": "object", "properties": {"a": {"type": "integer", "minimum": 5, "maximum": 1}}, "required": ["a"]},
        {"type": "object", "properties": [], "required": "a"},
        {"$ref": "#"},
    ],
)
def test_unusual_or_unsatisfiable_schemas_still_get_a_call(schema: dict[str, Any]) -> None:
    text = generate(Turn([{"role": "user", "content": ASK}], [tool("submit", schema)], "required"))
    ((name, _, args),) = CALL.findall(text)
    assert name == "submit" and isinstance(json.loads(args), dict)


@pytest.mark.parametrize(
    "prompt, expected",
    [
        ("Return the weather of Beijing as JSON. The response must contain a key named 'city'.", {"city": "Beijing"}),
        ('请以JSON格式返回北京的天气，包含字段"city"', {"city": "北京"}),
    ],
)
def test_an_answer_asked_for_as_json_is_a_json_object_with_the_named_keys(prompt: str, expected: dict) -> None:
    answer = generate(Turn([{"role": "user", "content": prompt}], [])).partition(THINK_END)[2]
    assert json.loads(answer) == expected
    assert "{" not in generate(Turn([{"role": "user", "content": "Explain what JSON is"}], [])).partition(THINK_END)[2]


# -- the model-like decision under auto (intent.py): tasks a tool performs call it, knowledge and "don't" decline ------

SEARCH = tool(
    "web_search",
    {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    "Search the web",
)
RUN = tool(
    "run_command",
    {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    "Run a shell command",
)
AGENT_TOOLS = [READ, WRITE, WEATHER, SEARCH, RUN]


@pytest.mark.parametrize(
    "prompt, expected",
    [
        (
            "Open config/settings.yaml and tell me which port the server uses.",
            ("read_file", "path", "config/settings.yaml"),
        ),
        ("What's in main.py?", ("read_file", "path", "main.py")),
        ("Can you take a look at src/app.ts?", ("read_file", "path", "src/app.ts")),
        ("Explain what utils/retry.py does", ("read_file", "path", "utils/retry.py")),
        ("帮我打开 notes.md 看看", ("read_file", "path", "notes.md")),
        ("Save this as todo.txt: buy milk", ("write_file", "path", "todo.txt")),
        ("Is it raining in Paris right now?", ("get_weather", "city", "Paris")),
        ("Do I need an umbrella in London today?", ("get_weather", "city", "London")),
        ("Look up the population of Tokyo", ("web_search", "query", "population of Tokyo")),
        ("Find the latest news about SGLang releases", ("web_search", "query", "SGLang releases")),
    ],
)
def test_auto_calls_a_tool_for_a_task_it_performs_without_its_words(
    prompt: str, expected: tuple[str, str, str]
) -> None:
    name, key, value = expected
    (found,) = calls(prompt, AGENT_TOOLS)
    assert found[0] == name and found[1][key] == value
    # the decision is the request's, not the shared words': none of these prompts names the tool or its description
    assert not set(re.findall(r"\w+", prompt.lower())) & {name, *name.split("_")} - {"file"}


@pytest.mark.parametrize(
    "prompt",
    [
        "Explain how weather forecasts work",
        "What is a binary tree?",
        "Why is the sky blue?",
        "Tell me about the history of Paris.",
        "What is the capital of France?",
        "Describe what a file system does.",
        "How does web search ranking work in general?",
        "Write a haiku about autumn",
    ],
)
def test_auto_answers_a_knowledge_request_in_text(prompt: str) -> None:
    assert calls(prompt, AGENT_TOOLS) == []
    assert calls(prompt, AGENT_TOOLS, "required") != []  # required still forces one


@pytest.mark.parametrize(
    "prompt",
    [
        "Is it raining in Paris? Don't look it up, just guess.",
        "What's the weather usually like in Rome in May? Answer from memory.",
        "Off the top of your head, what does config.yaml usually hold?",
        "No need to search, what is SGLang?",
        "北京天气怎么样？不用查，随便说说。",
    ],
)
def test_auto_answers_in_text_when_the_prompt_says_not_to(prompt: str) -> None:
    assert calls(prompt, AGENT_TOOLS) == []


def test_moonshot_verifier_cases_under_auto_still_decide_as_before() -> None:
    """The tool_choice cases of Moonshot's Kimi Vendor Verifier (their prompts, our tool set)."""
    assert [n for n, _ in calls("北京今天天气怎么样？请查一下，你应当使用工具。", [WEATHER])] == ["get_weather"]
    assert [
        n for n, _ in calls("北京今天天气怎么样？请务必调用工具 get_weather 查询，不要直接文字回答。", [WEATHER])
    ] == ["get_weather"]
    assert calls("你好，请简单介绍一下你自己。你不应使用任何工具。", [WEATHER]) == []
    assert [n for n, _ in calls("请简要回答：北京天气怎么样？", [WEATHER], "required")] == ["get_weather"]
    assert calls("请查一下北京的天气。", [WEATHER], "none") == []


# Issue 44: argument generation is bounded whatever schema a client sends (schema_values.ArgumentBudget).
def _tree() -> dict[str, Any]:
    node = {
        "type": "object",
        "properties": {"l": {"$ref": "#/$defs/n"}, "r": {"$ref": "#/$defs/n"}},
        "required": ["l", "r"],
    }
    return {"$defs": {"n": node}, "type": "object", "properties": {"root": {"$ref": "#/$defs/n"}}, "required": ["root"]}


def _nested(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"x": schema}, "required": ["x"]}
    return schema


UNBOUNDED = {
    "binary $ref tree, every node requires l and r": _tree(),
    "binary $ref tree, every node with a 16k-member enum (the 3 s deadline)": {
        "$defs": {
            "n": {
                "type": "object",
                "properties": {
                    "l": {"$ref": "#/$defs/n"},
                    "r": {"$ref": "#/$defs/n"},
                    "e": {"enum": list(range(16384))},
                },
                "required": ["e", "l", "r"],
            }
        },
        "$ref": "#/$defs/n",
    },
    "minLength 1e9": {"type": "object", "properties": {"s": {"type": "string", "minLength": 10**9}}, "required": ["s"]},
    "minLength 1e9 with a pattern": {
        "type": "object",
        "properties": {"s": {"type": "string", "pattern": "^a+$", "minLength": 10**9}},
        "required": ["s"],
    },
    "minItems 1e9": {"type": "object", "properties": {"a": {"type": "array", "minItems": 10**9}}, "required": ["a"]},
    "minProperties 1e8": {
        "type": "object",
        "properties": {"o": {"type": "object", "minProperties": 10**8}},
        "required": ["o"],
    },
    "10 x 10 x 10 x 10 x 10 required arrays": {
        "$defs": {"a": {"type": "array", "minItems": 10, "items": {"$ref": "#/$defs/a"}}},
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/a"}},
        "required": ["a"],
    },
}


@pytest.mark.parametrize("case", list(UNBOUNDED))
def test_a_schema_without_a_bounded_instance_ends_with_a_clear_error_in_bounded_time(case: str) -> None:
    from kimi_serve.simulator.schema_values import MAX_SECONDS, TooCostly

    started = time.monotonic()
    with pytest.raises(TooCostly, match=r"tool 'submit': the simulator cannot write arguments .*; send a schema"):
        generate(Turn([{"role": "user", "content": ASK}], [tool("submit", UNBOUNDED[case])], "required"))
    assert time.monotonic() - started < MAX_SECONDS + 2  # the budget's deadline, plus what the decision around it costs


def test_a_16k_member_enum_is_not_validated_member_by_member() -> None:
    members = [f"v{i}" for i in range(16384)]
    schema = {"type": "object", "properties": {"e": {"type": "string", "enum": members}}, "required": ["e"]}
    for prompt, wanted in ((ASK, "v0"), ("Call submit with v9000", "v9000")):
        started = time.monotonic()
        (call,) = CALL.findall(
            generate(Turn([{"role": "user", "content": prompt}], [tool("submit", schema)], "required"))
        )
        assert json.loads(call[2]) == {"e": wanted}
        assert time.monotonic() - started < 3  # was 7 s to minutes: every member validated against the whole schema


def test_deep_nesting_and_a_long_asked_for_text_stay_bounded() -> None:
    (call,) = CALL.findall(
        generate(Turn([{"role": "user", "content": ASK}], [tool("submit", _nested(3000))], "required"))
    )
    assert len(call[2]) < 100_000
    huge_max = {"type": "object", "properties": {"a": {"type": "array", "maxItems": 10**9}}, "required": ["a"]}
    (call,) = CALL.findall(generate(Turn([{"role": "user", "content": ASK}], [tool("submit", huge_max)], "required")))
    assert len(json.loads(call[2])["a"]) == 1  # a huge maxItems is room, not a target
    text = generate(Turn([{"role": "user", "content": "Write at least 999999999999 characters about cats"}], []))
    assert len(text) < 2 * 2**20  # padded to the bound, not to a terabyte


def test_a_response_format_sketch_is_bounded() -> None:
    from kimi_serve.simulator.constrain import sketch

    huge = {"type": "array", "minItems": 10**9, "items": {"type": "string", "minLength": 10**9}}
    assert len(json.dumps(sketch(huge, "x"))) < 1_000_000
    wide = {"type": "object", "required": [f"k{i}" for i in range(50)]}
    wide["properties"] = {f"k{i}": wide for i in range(50)}  # 50 ** 8 leaves unbounded
    assert len(json.dumps(sketch(wide, "x"))) < 1_000_000
