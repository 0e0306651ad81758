"""The probes: what each one asks the model, in which modes, and which rules its answer must meet."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kimi_serve.core import suites
from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.findings import Finding
from kimi_serve.verify import diagnose as dx
from kimi_serve.verify.answer import Answer
from kimi_serve.verify.report import problem
from kimi_serve.verify.tool_findings import tool_turn_findings

NON_STREAM, STREAM = "non-stream", "stream"
TEMPERATURE = 0.6  # Kimi-K2.5's instant-mode recommendation; low enough for stable tool use
MAX_TOKENS = 4096
LARGE_ARG_BYTES = 8192

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city"],
    "additionalProperties": False,
}
CLOCK = {
    "type": "object",
    "properties": {"timezone": {"type": "string", "description": "IANA time zone, e.g. Europe/Paris"}},
    "required": ["timezone"],
    "additionalProperties": False,
}
WRITE_FILE = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
    "required": ["path", "content"],
    "additionalProperties": False,
}


def tool_spec(name: str, description: str, schema: dict[str, Any], *, strict: bool = False) -> dict[str, Any]:
    function = {"name": name, "description": description, "parameters": schema}
    return {"type": "function", "function": {**function, "strict": True} if strict else function}


WEATHER_TOOLS = [
    tool_spec("get_weather", "Current weather for a city.", WEATHER),
    tool_spec("get_time", "Current local time in a time zone.", CLOCK),
]
FILE_TOOLS = [tool_spec("write_file", "Write text to a file, replacing it.", WRITE_FILE)]
WEATHER_RESULT = '{"city": "Paris", "temperature_c": 18, "condition": "sunny"}'


def schemas(tools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {t["function"]["name"]: t["function"]["parameters"] for t in tools}


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


@dataclass(frozen=True)
class Probe:
    name: str
    messages: list[dict[str, Any]]
    check: dx.Check
    modes: tuple[str, ...] = (NON_STREAM, STREAM)
    tools: tuple[dict[str, Any], ...] = ()
    template_kwargs: dict[str, Any] | None = None
    max_tokens: int = MAX_TOKENS
    extra: tuple[tuple[str, Any], ...] = ()  # more request fields, as a client sends them (verify/agentic.py)
    # a second turn built from this one's answer (the tool loop, verify/agentic.py); None when the answer cannot
    # be replayed (no parsed call), so this probe's own rules judge it
    follow_up: Callable[[Answer], Probe | None] | None = None

    def body(self, model: str, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "messages": self.messages,
            "temperature": TEMPERATURE,
            "max_tokens": self.max_tokens,
            "stream": stream,
        }
        if self.tools:
            body["tools"] = list(self.tools)
            body["tool_choice"] = "auto"
        if self.template_kwargs is not None:
            body["chat_template_kwargs"] = self.template_kwargs
        body.update(self.extra)
        return body


def tool_check(tools: list[dict[str, Any]], min_calls: int = 1) -> dx.Check:
    offered = schemas(tools)
    return dx.answer_check(lambda answer, _server: tool_turn_findings(answer, offered, min_calls=min_calls))


def _sequence_gap(text: str) -> str | None:
    """Where ``text`` stops being "1 2 3 ... N", or None when it is that sequence."""
    words = text.split()
    for expected, word in enumerate(words, start=1):
        if word != str(expected):
            before = words[expected - 2] if expected > 1 else "the start"
            return f"after {before} comes {word[:20]!r}, expected {expected}"
    return None


def _large_arg_check(answer: Answer, server: dict[str, Any]) -> list[Finding]:
    found = tool_check(FILE_TOOLS)(answer, server)
    if found:
        return found
    arguments = answer.tool_calls[0].arguments or ""
    if len(arguments.encode()) < LARGE_ARG_BYTES:
        return [
            problem(
                "argument_small",
                f"the tool argument is {len(arguments.encode())} bytes, under "
                f"{LARGE_ARG_BYTES}: the large-argument path was not exercised",
                "rerun; if it repeats, the server cut the call short: read its log",
            )
        ]
    gap = _sequence_gap(json.loads(arguments)["content"])
    if gap:
        return [
            problem(
                "argument_corrupt",
                f"the streamed {len(arguments)}-byte argument is not the requested "
                f"sequence ({gap}): fragments were lost or reordered",
                "rerun; if it repeats, the stream drops argument fragments: check --tool-call-parser kimi_k2 "
                "and the speculative decoding settings, and read the SGLang log",
            )
        ]
    return []


def _second_turn_check(answer: Answer, server: dict[str, Any]) -> list[Finding]:
    return dx.text_findings(answer, server) + dx.final_answer_findings(answer, after="after the tool result")


TOOL = Probe(
    "tool",
    _user("What is the weather in Paris right now? Use the get_weather tool."),
    tool_check(WEATHER_TOOLS),
    tools=tuple(WEATHER_TOOLS),
)
REASONING = Probe(
    "reasoning",
    _user("What is 17 * 23? Think it through, then give the number."),
    dx.answer_check(dx.reasoning_findings),
)
INSTANT = Probe(
    "instant",
    _user("What is the capital of France? Answer with one word."),
    dx.answer_check(lambda answer, _server: dx.instant_findings(answer)),
    template_kwargs={"thinking": False},
)
PARALLEL = Probe(
    "parallel",
    _user(
        "What is the weather in Paris and in Tokyo? Call get_weather once for each city, both calls in this one turn."
    ),
    tool_check(WEATHER_TOOLS, min_calls=2),
    tools=tuple(WEATHER_TOOLS),
)
SECOND_TURN = Probe(
    "tool-result",
    [
        {"role": "user", "content": "What is the weather in Paris right now? Use the get_weather tool."},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "The user wants the Paris weather; call get_weather.",
            "tool_calls": [
                {
                    "id": "functions.get_weather:0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": WEATHER_RESULT},
    ],
    _second_turn_check,
    tools=tuple(WEATHER_TOOLS),
)
LARGE_ARG = Probe(
    "large-argument",
    _user(
        'Call write_file exactly once with path "count.txt" and as content every integer from 1 to 2000 in '
        "order, separated by single spaces and nothing else. Do not shorten it."
    ),
    _large_arg_check,
    modes=(STREAM,),
    tools=tuple(FILE_TOOLS),
    template_kwargs={"thinking": False},
    max_tokens=16384,
)

QUICK = (TOOL, REASONING)
FULL = QUICK + (INSTANT, PARALLEL, SECOND_TURN, LARGE_ARG)


def suite(name: str) -> tuple[Probe, ...]:
    if name not in suites.SUITES:
        raise KimiServeError(
            f"unknown verify suite {name!r}",
            where="suite",
            hint=f"use {', '.join(suites.SUITES[:-1])} or {suites.SUITES[-1]}",
        )
    return {suites.QUICK: QUICK, suites.FULL: FULL, suites.RAW: ()}[name]
