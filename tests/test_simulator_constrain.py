"""The simulator's constrained generation (SGLang's own xgrammar backend) and SGLang's request checks, over real HTTP
with the official `openai` client. Two simulator processes for the module: the kimi_k2 parsers with the default grammar
backend (xgrammar), and the same with `--grammar-backend none`."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import jsonschema
import openai
import pytest
from sim_pool import PARSED_TP8, SHARED_KEY, SHARED_MODEL, SimulatorPool

FLAGS, KEY, MODEL = PARSED_TP8, SHARED_KEY, SHARED_MODEL  # the pool's standard server
OFF = {"chat_template_kwargs": {"thinking": False}}
NO_BACKEND = (
    "Grammar-based generation (json_schema, regex, ebnf, structural_tag) is not supported when the server is"
    " launched with --grammar-backend none"
)
CITY = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Z][a-z]+$"},
        "population": {"type": "integer", "minimum": 1000},
        "kind": {"type": "string", "enum": ["capital", "town"]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
        "where": {"type": "object", "properties": {"lat": {"type": "number"}}, "required": ["lat"]},
        "mayor": {"type": ["string", "null"]},
    },
    "required": ["name", "population", "kind", "tags", "where", "mayor"],
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Get the local time in a timezone",
        "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]},
    },
}


@pytest.fixture(scope="module")
def client(simulator_pool: SimulatorPool) -> openai.OpenAI:
    sim = simulator_pool.get(FLAGS, key=KEY)
    return openai.OpenAI(base_url=sim.base_url + "/v1", api_key=KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def bare(simulator_pool: SimulatorPool) -> openai.OpenAI:
    sim = simulator_pool.get([*FLAGS, "--grammar-backend", "none"], key=KEY)
    return openai.OpenAI(base_url=sim.base_url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def _ask(client: openai.OpenAI, text: str = "Describe Paris as JSON", **kw: object) -> object:
    kw.setdefault("max_tokens", 1024)
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}], **kw)


def _streamed(client: openai.OpenAI, **kw: object) -> tuple[str, str, str | None]:
    content, reasoning, finish = "", "", None
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Describe Paris"}], max_tokens=1024, stream=True, **kw
    )
    for chunk in stream:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            reasoning += getattr(choice.delta, "reasoning_content", None) or ""
            finish = choice.finish_reason or finish
    return content, reasoning, finish


def _schema_format(strict: bool) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "city", "strict": strict, "schema": CITY}}


def test_json_object_answer_is_a_json_object_after_the_reasoning(client: openai.OpenAI) -> None:
    resp = _ask(client, response_format={"type": "json_object"})
    msg = resp.choices[0].message
    assert isinstance(json.loads(msg.content), dict), msg.content
    assert msg.reasoning_content and "</think>" not in msg.content  # the grammar starts after the reasoning
    content, reasoning, finish = _streamed(client, response_format={"type": "json_object"})
    assert isinstance(json.loads(content), dict) and reasoning and finish == "stop"


@pytest.mark.parametrize("strict", [True, False])
def test_json_schema_answers_are_valid_against_the_schema(client: openai.OpenAI, strict: bool) -> None:
    for extra in ({}, {"extra_body": OFF}):
        resp = _ask(client, response_format=_schema_format(strict), **extra)
        assert resp.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(resp.choices[0].message.content), CITY)
    content, _, finish = _streamed(client, response_format=_schema_format(strict))
    jsonschema.validate(json.loads(content), CITY)
    assert finish == "stop"


def test_formats_and_patterns_come_back_valid(client: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {
            "email": {"type": "string", "format": "email"},
            "when": {"type": "string", "format": "date"},
            "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
            "note": {"type": "string", "minLength": 40},
        },
        "required": ["email", "when", "code", "note"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "f", "strict": True, "schema": schema}}
    value = json.loads(_ask(client, "hello", response_format=fmt).choices[0].message.content)
    jsonschema.validate(value, schema, format_checker=jsonschema.FormatChecker())
    assert re.fullmatch(r"[A-Z]{2}-[0-9]{3}", value["code"]) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value["when"])


def test_regex_and_ebnf_constraints_decide_the_text(client: openai.OpenAI) -> None:
    digits = _ask(client, extra_body={"regex": "[0-9]{3}", **OFF}).choices[0].message.content
    assert re.fullmatch(r"[0-9]{3}", digits), digits
    answer = _ask(client, extra_body={"ebnf": 'root ::= "yes" | "no"', **OFF}).choices[0].message.content
    assert answer in ("yes", "no")


def test_required_and_named_tool_choice_force_the_call(client: openai.OpenAI) -> None:
    required = _ask(client, "Hello there", tools=[WEATHER, CLOCK], tool_choice="required").choices[0]
    assert required.finish_reason == "tool_calls" and required.message.tool_calls
    direct = _ask(
        client,
        "What is the weather in Paris?",
        tools=[WEATHER, CLOCK],
        tool_choice="required",
        max_tokens=300,
        extra_body=OFF,
    ).choices[0]  # the grammar from the first token: no preface
    assert direct.finish_reason == "tool_calls" and direct.message.tool_calls[0].function.name == "get_weather"
    named = _ask(
        client,
        "What is the weather in Paris?",
        tools=[WEATHER, CLOCK],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    ).choices[0]
    assert [c.function.name for c in named.message.tool_calls] == ["get_time"]
    jsonschema.validate(json.loads(named.message.tool_calls[0].function.arguments), CLOCK["function"]["parameters"])
    strict = {
        "type": "function",
        "function": {
            **CLOCK["function"],
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {"timezone": {"type": "string", "enum": ["UTC", "CET"]}},
                "required": ["timezone"],
                "additionalProperties": False,
            },
        },
    }
    forced = _ask(client, "What time is it?", tools=[strict], tool_choice="required").choices[0]
    assert json.loads(forced.message.tool_calls[0].function.arguments)["timezone"] in ("UTC", "CET")


def test_a_schema_xgrammar_cannot_compile_is_sglangs_400(client: openai.OpenAI) -> None:
    bad = {
        "type": "json_schema",
        "json_schema": {
            "name": "x",
            "schema": {"type": "object", "properties": {"a": {"$ref": "#/missing"}}, "required": ["a"]},
        },
    }
    with pytest.raises(openai.BadRequestError, match="Failed to compile json grammar"):
        _ask(client, response_format=bad)


def test_grammar_backend_none_rejects_constraints_as_sglang(bare: openai.OpenAI) -> None:
    for kw in (
        {"response_format": {"type": "json_object"}},
        {"tools": [WEATHER], "tool_choice": "required"},
        {"extra_body": {"regex": "[0-9]+"}},
    ):
        with pytest.raises(openai.BadRequestError) as info:
            _ask(bare, **kw)
        assert NO_BACKEND in str(info.value)
    with pytest.raises(openai.APIError, match="--grammar-backend none"):  # a stream has started: an error event
        _streamed(bare, response_format={"type": "json_object"})
    auto = _ask(bare, "What is the weather in Paris?", tools=[WEATHER]).choices[0]
    assert auto.message.tool_calls and auto.message.tool_calls[0].function.name == "get_weather"  # nothing to compile


def test_sampling_params_are_checked_by_sglang(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        _ask(client, temperature=-0.1)
    assert info.value.status_code == 400
    assert info.value.body["message"] == "temperature must be a non-negative finite number, got -0.1."
    with pytest.raises(openai.BadRequestError, match=re.escape("top_p must be in (0, 1], got 0.0.")):
        _ask(client, top_p=0)
    with pytest.raises(openai.BadRequestError, match=re.escape("presence_penalty must be in [-2, 2], got 2.5.")):
        _ask(client, presence_penalty=2.5)
    with pytest.raises(openai.BadRequestError, match="temperature must be a non-negative"):  # before the stream
        _streamed(client, temperature=-1)
    with pytest.raises(openai.BadRequestError, match="maximum context length of 262144 tokens"):
        _ask(client, max_tokens=300000)
    assert _ask(client, temperature=0, top_p=1, max_tokens=16).choices[0].finish_reason in ("stop", "length")


def test_n_samples_come_back_as_n_choices(client: openai.OpenAI) -> None:
    resp = _ask(client, "Tell me about Paris", n=2, extra_body=OFF)
    assert [c.index for c in resp.choices] == [0, 1]
    assert resp.choices[0].message.content == resp.choices[1].message.content  # the scripted model is deterministic
    single = _ask(client, "Tell me about Paris", extra_body=OFF)
    assert resp.usage.completion_tokens == 2 * single.usage.completion_tokens
    texts: dict[int, str] = {}
    for chunk in client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Tell me"}], n=2, stream=True, extra_body=OFF
    ):
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
    assert sorted(texts) == [0, 1] and texts[0] == texts[1] != ""


def test_stop_strings_end_and_trim_the_answer(client: openai.OpenAI) -> None:
    full = _ask(client, "Tell me about Paris", extra_body=OFF).choices[0].message.content
    word = full.split()[3]
    cut = _ask(client, "Tell me about Paris", stop=[word], extra_body=OFF).choices[0]
    assert cut.finish_reason == "stop" and cut.message.content == full[: full.index(word)]
    kept = _ask(client, "Tell me about Paris", stop=[word], extra_body={**OFF, "no_stop_trim": True}).choices[0]
    assert kept.message.content == full[: full.index(word) + len(word)]
    pieces = [
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Tell me about Paris"}],
            stop=[word],
            stream=True,
            extra_body=OFF,
        )
        if c.choices
    ]
    assert "".join(pieces) == full[: full.index(word)]  # held back while it could be the stop string, never leaked
    with pytest.raises(openai.BadRequestError, match="stop strings are allowed"):
        _ask(client, stop=[f"s{i}" for i in range(33)])  # SGLang allows 32


def _generate(client: openai.OpenAI, body: dict) -> object:
    base = str(client.base_url).rstrip("/").removesuffix("/v1")
    req = urllib.request.Request(
        base + "/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def test_native_generate_n_samples_and_stop_token_ids(client: openai.OpenAI) -> None:
    prompt = "<|im_user|>user<|im_middle|>Tell me about Paris<|im_end|><|im_assistant|>assistant<|im_middle|>"
    samples = _generate(client, {"text": prompt, "sampling_params": {"n": 2, "max_new_tokens": 64}})
    assert isinstance(samples, list) and len(samples) == 2 and samples[0]["text"] == samples[1]["text"]
    first = samples[0]
    stop_id = first["output_ids"][5]
    cut = _generate(client, {"text": prompt, "sampling_params": {"max_new_tokens": 64, "stop_token_ids": [stop_id]}})
    assert cut["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop_id}
    assert cut["output_ids"] == first["output_ids"][: first["output_ids"].index(stop_id) + 1]
