"""The agentic probes: requests shaped as real agent clients send them (docs/verify.md "Agentic probes"): the
two-turn tool loop (the server's own call replayed as each client replays it, :data:`REPLAYS`), ``strict: true``
tools, two calls in one streamed turn, thinking off in each dialect clients use. The runner adds them to the suite's
own probes; the budget (verify/budget.py) and the load probe (verify/load.py) run beside them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from typing import Any

from kimi_serve.core.suites import FULL, QUICK
from kimi_serve.verify import agent_rules as rules
from kimi_serve.verify import diagnose as dx
from kimi_serve.verify.answer import Answer
from kimi_serve.verify.probes import (
    CLOCK,
    INSTANT,
    NON_STREAM,
    PARALLEL,
    STREAM,
    TOOL,
    WEATHER_RESULT,
    WEATHER_TOOLS,
    Probe,
    schemas,
    tool_check,
    tool_spec,
)

# what openai-agents and pydantic-ai make of a tool: every property required, no others
STRICT_WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "City name, e.g. Paris"}},
    "required": ["city"],
    "additionalProperties": False,
}
STRICT_TOOLS = [
    tool_spec("get_weather", "Current weather for a city.", STRICT_WEATHER, strict=True),
    tool_spec("get_time", "Current local time in a time zone.", CLOCK, strict=True),
]
ONE_CALL = TOOL.messages[0]["content"]
LOOP_CALL = "Use the get_weather tool: what is the weather in {city} right now?"  # each loop its own request
TWO_CALLS = PARALLEL.messages[0]["content"]
ONE_WORD = "What is the capital of France? Answer with one word."


def _strict_check(min_calls: int) -> dx.Check:
    offered = schemas(STRICT_TOOLS)
    return dx.answer_check(lambda answer, server: rules.strict_findings(answer, offered, server, min_calls=min_calls))


def _user(text: str, parts: bool = False) -> list[dict[str, Any]]:
    return [{"role": "user", "content": _content(text, parts)}]


def _content(text: str, parts: bool) -> Any:
    if not parts:
        return text
    return [{"type": "text", "text": text}] if text else []


@dataclass(frozen=True)
class Replay:
    """How a client sends the history back: the assistant's reasoning_content or not, content as list of parts."""

    reasoning: bool
    parts: bool
    label: str  # what the history is and who sends it that way (in every finding of the follow-up)


REPLAYS = {  # name -> (how the history goes back, the city asked for)
    "loop": Replay(True, False, "history with reasoning_content, as opencode, the AI SDK and pydantic-ai send it"),
    "loop-parts": Replay(
        True, True, "content as lists of parts (`content: []` beside the calls), as kimi-cli sends it"
    ),
    "loop-no-reasoning": Replay(
        False, False, "history without reasoning_content, as openai-agents and LangChain send it"
    ),
}


def second_turn(name: str, replay: Replay, answer: Answer) -> Probe | None:
    """The follow-up request an agent sends after running the calls in ``answer``; None when a call cannot be
    replayed (no id or name: the first turn's own rules judge it)."""
    calls = tuple(answer.tool_calls)
    if not calls or any(not (c.id and c.name) for c in calls):
        return None
    assistant: dict[str, Any] = {
        "role": "assistant",
        "content": _content(answer.content or "", replay.parts),
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments or "{}"}}
            for c in calls
        ],
    }
    if replay.reasoning and answer.reasoning:
        assistant["reasoning_content"] = answer.reasoning
    results = [{"role": "tool", "tool_call_id": c.id, "content": _content(WEATHER_RESULT, replay.parts)} for c in calls]
    check = dx.answer_check(lambda follow, _server: rules.follow_up_findings(follow, calls, replay.label))
    messages = [*_user(_loop_prompt(name), replay.parts), assistant, *results]
    return Probe(name, messages, check, tools=tuple(WEATHER_TOOLS))


def _loop_prompt(name: str) -> str:
    return LOOP_CALL.format(city={"loop": "Paris", "loop-parts": "Madrid"}.get(name, "Rome"))


def loop(name: str, modes: tuple[str, ...]) -> Probe:
    """The first turn of a tool loop (the tool rules judge it when it gives nothing to replay)."""
    replay = REPLAYS[name]
    return Probe(
        name,
        _user(_loop_prompt(name), replay.parts),
        tool_check(WEATHER_TOOLS),
        modes=modes,
        tools=tuple(WEATHER_TOOLS),
        follow_up=partial(second_turn, name, replay),
    )


def _dialect(name: str, dialect: str) -> Probe:
    fields, clients = next((f, c) for d, f, c in rules.DIALECTS if d == dialect)
    return Probe(
        name,
        [{"role": "user", "content": ONE_WORD}],
        dx.answer_check(lambda answer, _server: rules.dialect_findings(answer, dialect, clients)),
        modes=(NON_STREAM,),
        extra=tuple(fields.items()),
    )


STRICT = Probe("strict-tool", _user(ONE_CALL), _strict_check(1), tools=tuple(STRICT_TOOLS))
STRICT_PARALLEL = Probe(
    "strict-parallel", _user(TWO_CALLS), _strict_check(2), modes=(STREAM,), tools=tuple(STRICT_TOOLS)
)
INSTANT_EFFORT = _dialect("instant-effort", "reasoning_effort")
INSTANT_MOONSHOT = _dialect("instant-moonshot", "thinking")
# which probe tries which dialect (chat_template_kwargs: the suite's own `instant`, a failure when ignored)
DIALECT_PROBES = {
    "chat_template_kwargs": INSTANT.name,
    "reasoning_effort": INSTANT_EFFORT.name,
    "thinking": INSTANT_MOONSHOT.name,
}

# quick (the start gate) carries one request of each agentic shape a single answer shows wrong: the loop with and
# without reasoning_content (Moonshot's rule refuses the latter with a 400: openai-agents, LangChain) and two calls
# in one streamed turn (a stream that loses the second call). Its two-turn loops run side by side, so quick still
# takes about one loop (docs/verify.md "Speed").
QUICK_PROBES = (
    dataclasses.replace(INSTANT, modes=(NON_STREAM,)),
    INSTANT_EFFORT,
    INSTANT_MOONSHOT,
    dataclasses.replace(STRICT, modes=(NON_STREAM,)),
    loop("loop", (STREAM,)),
    loop("loop-no-reasoning", (NON_STREAM,)),
    dataclasses.replace(PARALLEL, modes=(STREAM,)),
)
FULL_PROBES = (
    INSTANT_EFFORT,
    INSTANT_MOONSHOT,
    STRICT,
    STRICT_PARALLEL,
    loop("loop", (NON_STREAM, STREAM)),
    loop("loop-parts", (STREAM,)),
    loop("loop-no-reasoning", (NON_STREAM,)),
)


def agentic_probes(suite: str) -> tuple[Probe, ...]:
    """What a suite adds to its own probes (verify/probes.py): quick the cheap ones, full all."""
    return {QUICK: QUICK_PROBES, FULL: FULL_PROBES}.get(suite, ())
