"""The scripted Kimi-K2.5 stand-in: what the simulated model "generates" for a chat request, as Kimi's raw text.

Pure Python (no sglang), deterministic: the request (messages, tools, tool_choice) and the thinking mode become the
exact text Kimi-K2.5 would decode, special tokens included (``reasoning</think><|tool_calls_section_begin|>...``);
SGLang's own parsers turn it into ``tool_calls`` and ``reasoning_content``. The rules are in docs/simulator.md, "The
scripted model".
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any

from kimi_serve.simulator import decision, intent, tasks
from kimi_serve.simulator.schema_strings import clip, pad
from kimi_serve.simulator.schema_values import MAX_CHARS, ArgumentBudget, TooCostly, Values, long_text_key

logger = logging.getLogger("kimi_serve.simulator")

THINK_END = "</think>"
SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARG_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"


@dataclass(frozen=True)
class Turn:
    """What the scripted model sees: the conversation and the offered tools (OpenAI shapes, plain dicts)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    tool_choice: Any = "auto"
    thinking: bool = True


def generate(turn: Turn) -> str:
    """The full raw completion text (without the final ``<|im_end|>`` stop token)."""
    last = turn.messages[-1] if turn.messages else {"role": "user", "content": ""}
    prompt = _last_user_text(turn.messages)
    min_chars = _min_chars(prompt)
    sequence = _sequence(prompt)
    functions = decision.offered(turn.tools, turn.tool_choice, turn.messages)
    if last.get("role") == "tool":
        result = _text_of(last.get("content"))
        reasoning = "The tool returned its result. I will summarize it for the user."
        answer = f"Here is what the tool returned: {clip(result, 400)}"
        title = _HEADING.search(result) if re.search(r"\btitle\b|\bheading\b", prompt, re.I) else None
        answer = f"The title is “{title.group(1)}”. {answer}" if title else answer  # the result, used
        if _FAILED.search(result) and not title:  # one answer that says so, not a loop of retries
            reasoning = "The tool call failed. I will tell the user what went wrong instead of guessing."
            answer = f"The tool call failed: {clip(result, 400)}"
        return _with_reasoning(turn.thinking, reasoning, pad(answer, min_chars))
    calls = _calls(turn, functions, prompt, min_chars, sequence)
    if calls:
        names = ", ".join(dict.fromkeys(name for name, _ in calls))
        reasoning = f"The user asks: {clip(prompt, 160)} The best matching tool is {names}, so I will call it."
        lead = "" if turn.thinking else f"I will call {names}."
        return _with_reasoning(turn.thinking, reasoning, lead) + _tool_section(calls, _history_calls(turn.messages))
    why = "The user asks me not to use tools" if functions and decision.declines(prompt) else "No tool is needed"
    reasoning = f"The user asks: {clip(prompt, 160)} {why}; I will answer directly."
    answer = sequence or json_answer(prompt) or f"Here is a direct answer to your request: {clip(prompt, 200)}"
    return _with_reasoning(turn.thinking, reasoning, pad(answer, min_chars))


_FAILED = re.compile(r"^\W*(?:error|exception|traceback)\b|\b(?:failed|not\s+found|no\s+such\s+file)\b", re.I)
# a Markdown title, also in a numbered listing (opencode's "1: # T", kimi-cli's cat -n "     1\t# T")
_HEADING = re.compile(r"^\s*(?:\d+(?::|\t)\s*)?#\s+(.+?)\s*$", re.M)
_FOLLOW_UP = re.compile(r"^\W*(?:and|what\s+about|how\s+about|also|same\s+for|now)\b", re.IGNORECASE)


def _calls(
    turn: Turn, functions: list[dict[str, Any]], prompt: str, min_chars: int, sequence: str | None
) -> list[tuple[str, dict[str, Any]]]:
    """The calls to make: an everyday agent task's (tasks.py) under auto, else decision.py's choice among the tools
    the request may get; a follow-up ("And in Tokyo?") repeats the conversation's last tool with its own values."""
    auto = turn.tool_choice in ("auto", None)
    budget = ArgumentBudget()  # one for the turn's calls: values, characters, seconds (schema_values.py)
    planned = tasks.plan(functions, prompt) if auto and functions and not decision.declines(prompt) else None
    if planned is not None:
        done, rest = planned
        others = tasks.beside(functions, prompt)
        more = decision.choose(others, rest) if done and rest and others else []  # "... and get the weather"
        hinted = decision.hints_per_call(more, rest)
        pairs = zip(more, hinted, strict=True)
        extra = [(fn["name"], _arguments(fn, rest, h, budget=budget)) for fn, h in pairs]
        return [(fn["name"], _with(fn, fixed, prompt, budget)) for fn, fixed in done] + extra
    chosen = decision.choose(tasks.safe(functions, prompt) if auto else functions, prompt, turn.tool_choice)
    if not chosen and auto and _FOLLOW_UP.search(prompt) and decision.candidates(prompt):
        last = _last_call_name(turn.messages)
        chosen = [fn for fn in functions if fn.get("name") == last][:1]
    hints = decision.hints_per_call(chosen, prompt)
    query = intent.topic(chosen[0], prompt) if len(chosen) == 1 and not decision.quoted(prompt) else None
    hints = [[query, *hints[0]]] if query else hints  # a search tool's query: what the request asks about
    return [
        (fn["name"], _arguments(fn, prompt, h, min_chars, sequence, budget))
        for fn, h in zip(chosen, hints, strict=True)
    ]


def _arguments(
    fn: dict[str, Any],
    prompt: str,
    hints: list[str],
    min_chars: int = 0,
    sequence: str | None = None,
    budget: ArgumentBudget | None = None,
) -> dict[str, Any]:
    """:func:`arguments` for tool ``fn``; a schema beyond the bounds is a ValueError naming the tool (HTTP 400)."""
    schema = fn.get("parameters")
    try:
        return arguments(schema if isinstance(schema, dict) else {}, prompt, hints, min_chars, sequence, budget)
    except TooCostly as exc:
        raise TooCostly(
            f"tool {str(fn.get('name'))[:80]!r}: the simulator cannot write arguments for its parameters schema: "
            f"{exc}; send a schema with a finite, smaller instance"
        ) from None


def _with(fn: dict[str, Any], fixed: dict[str, Any], prompt: str, budget: ArgumentBudget) -> dict[str, Any]:
    """A planned call's arguments: the values the request names, the rest of the required ones from the schema."""
    schema = fn.get("parameters") or {}
    base = _arguments(fn, prompt, [], budget=budget)
    merged = {**{k: v for k, v in base.items() if k not in fixed}, **fixed}
    return merged if Values(schema, prompt).valid(schema, merged) else {**base, **fixed}


def _last_call_name(messages: list[dict[str, Any]]) -> str | None:
    for m in reversed(messages[:-1]):
        for call in reversed(m.get("tool_calls") or []) if m.get("role") == "assistant" else []:
            name = (call.get("function") or {}).get("name") if isinstance(call, dict) else None
            if name:
                return str(name)
    return None


_ASKS_JSON = re.compile(
    r"\b(?:as|in|with|return|returns|respond|reply|output|answer|give)\s+(?:only\s+)?(?:an?\s+)?"
    r"(?:valid\s+|compact\s+)?json\b|\bjson\s+(?:object|format|only)\b|json\s*格式|以\s*json",
    re.IGNORECASE,
)
_JSON_KEYS = re.compile(
    r"(?:\b(?:keys?|fields?|propert(?:y|ies)|attributes?)\b|字段|键|属性)"
    r"((?:\s*(?:named|called|,|and|:)?\s*[\"'`][^\"'`]+[\"'`])+)",
    re.IGNORECASE,
)


def json_answer(prompt: str) -> str | None:
    """The answer as a JSON object when the prompt asks for JSON ("as JSON", "JSON object", "json格式"): the keys it
    names ("a key named 'city'"), values from the prompt (Beijing); None when it does not ask for JSON."""
    if not _ASKS_JSON.search(prompt):
        return None
    keys = [k for m in _JSON_KEYS.finditer(prompt) for k in re.findall(r"[\"'`]([^\"'`]+)[\"'`]", m.group(1))]
    keys = list(dict.fromkeys(keys)) or ["answer"]
    hints = [h for h in decision.candidates(prompt) if h not in keys and h.lower() != "json"]
    if keys == ["answer"]:
        return json.dumps(
            {"answer": f"Here is a direct answer to your request: {clip(prompt, 200)}"}, ensure_ascii=False
        )
    schema = {"type": "object", "properties": {k: {"type": "string"} for k in keys}, "required": keys}
    return json.dumps(arguments(schema, prompt, hints), ensure_ascii=False)


def _with_reasoning(thinking: bool, reasoning: str, content: str) -> str:
    # The chat template already opened <think> in the prompt, so the completion starts inside the reasoning.
    return f"{reasoning}{THINK_END}{content}" if thinking else content


def _tool_section(calls: list[tuple[str, dict[str, Any]]], start_index: int) -> str:
    parts = [SECTION_BEGIN]
    for offset, (name, args) in enumerate(calls):
        parts += [CALL_BEGIN, f"functions.{name}:{start_index + offset}", ARG_BEGIN, json.dumps(args), CALL_END]
    parts.append(SECTION_END)
    return "".join(parts)


def _history_calls(messages: list[dict[str, Any]]) -> int:
    return sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant")


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # one part a line: kimi-cli sends a tool's result as parts ("<system>N lines read</system>", the listing)
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user":
            text = _text_of(m.get("content")).strip()
            whole = re.fullmatch(r"\"([^\"]*)\"|“([^”]*)”", text)  # a request sent in quotes (opencode run's)
            return next(g for g in whole.groups() if g is not None).strip() if whole else text
    return ""


def _min_chars(prompt: str) -> int:
    m = re.search(r"at least (\d[\d,]{0,15})\s*(?:characters|chars|letters)", prompt, re.IGNORECASE)
    return min(int(m.group(1).replace(",", "")), MAX_CHARS // 2) if m else 0  # a bound, whatever is asked


def _sequence(prompt: str) -> str | None:
    m = re.search(r"every (?:integer|number) from (\d+) to (\d+)", prompt, re.IGNORECASE)
    if not m or int(m.group(2)) - int(m.group(1)) > 100_000:
        return None
    return " ".join(str(i) for i in range(int(m.group(1)), int(m.group(2)) + 1))


def arguments(
    schema: dict[str, Any],
    prompt: str,
    hints: list[str],
    min_chars: int = 0,
    sequence: str | None = None,
    budget: ArgumentBudget | None = None,
) -> dict[str, Any]:
    """A call's arguments: schema-complete values (schema_values.py), the long text where the prompt asks for one.
    Raises TooCostly when the schema needs more than the turn's ``budget``."""
    combined = any(k in schema for k in ("$ref", "anyOf", "oneOf", "allOf"))
    root = schema if schema.get("type") or combined else {**schema, "type": "object"}
    try:
        gen = Values(root, prompt, budget)
        value = gen.value(root, "arguments", hints, min_chars)
    except TooCostly:
        raise
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, RecursionError, OverflowError) as exc:
        # a schema shape the generator does not expect (SGLang has already checked it against the metaschema):
        # empty arguments, as a model that gives up would send, rather than a failed request
        logger.warning(
            "simulated arguments: the schema could not be filled (%s: %s); sending {}", type(exc).__name__, exc
        )
        return {}
    if not isinstance(value, dict):
        return {}
    props = gen.flat(root).get("properties") or {}
    long_key = long_text_key(props, list(value)) if sequence else None
    if sequence and long_key and long_key not in {"path", "file", "filename", "file_path"}:
        candidate = {**value, long_key: sequence}
        if gen.valid(root, candidate):
            value = candidate
    return value
