"""The scripted Kimi-K2.5 stand-in: what the simulated model "generates" for a chat request, as Kimi's raw text.

Pure Python (no sglang): it turns the request (messages, tools, tool_choice) and the thinking mode into the exact text
Kimi-K2.5 would decode, special tokens included, e.g. ``reasoning</think><|tool_calls_section_begin|>...``. Parsing that
text into ``tool_calls`` and ``reasoning_content`` is left to SGLang's own parsers, exactly as on the real server.

Deterministic: the same request always gives the same text. Rules:
- tools offered (and tool_choice not "none") -> short reasoning, then a tool-call section calling the offered tool(s)
  whose name/description best match the last user message, with arguments generated from the JSON schema;
  several calls when the prompt asks for several ("two", "both", "3", or "X and Y" naming several tools);
- no tools -> reasoning, ``</think>``, an answer;
- the last message is a tool result -> reasoning, ``</think>``, a final answer quoting the result;
- thinking off -> no reasoning and no ``</think>``;
- "at least N characters" in the prompt -> the generated string argument (or the answer) has at least N characters;
- "every integer from A to B" -> that sequence, space-separated, as the main string argument (or the answer).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

THINK_END = "</think>"
SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARG_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"

_NUMBER_WORDS = {"two": 2, "both": 2, "pair": 2, "three": 3, "four": 4, "five": 5, "twice": 2, "thrice": 3}
_STOP_WORDS = {
    "the", "a", "an", "and", "or", "of", "to", "in", "on", "for", "with", "is", "are", "be", "it", "this", "that",
    "please", "me", "my", "you", "your", "can", "could", "would", "should", "what", "which", "how", "do", "does",
    "use", "call", "tool", "tools", "function", "functions", "at", "by", "from", "as", "i", "we", "all", "any",
    "then", "now", "both", "two", "three", "each", "get", "give", "show", "tell",
}
FILLER = (
    "Kimi-K2.5 simulated output keeps going with plain deterministic prose so that long arguments can be checked "
    "end to end by a real client. "
)


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
    functions = _offered_functions(turn.tools, turn.tool_choice)
    if last.get("role") == "tool":
        result = _text_of(last.get("content"))
        reasoning = "The tool returned its result. I will summarize it for the user."
        answer = f"Here is what the tool returned: {_clip(result, 400)}"
        return _with_reasoning(turn.thinking, reasoning, _pad(answer, min_chars))
    if functions:
        chosen = _choose(functions, prompt)
        hints = _hints_per_call(chosen, prompt)
        calls = [(fn["name"], _arguments(fn.get("parameters") or {}, prompt, h, min_chars, sequence))
                 for fn, h in zip(chosen, hints, strict=True)]
        names = ", ".join(dict.fromkeys(name for name, _ in calls))
        reasoning = f"The user asks: {_clip(prompt, 160)} The best matching tool is {names}, so I will call it."
        lead = "" if turn.thinking else f"I will call {names}."
        return _with_reasoning(turn.thinking, reasoning, lead) + _tool_section(calls, _history_calls(turn.messages))
    reasoning = f"The user asks: {_clip(prompt, 160)} No tool is needed; I will answer directly."
    answer = sequence or f"Here is a direct answer to your request: {_clip(prompt, 200)}"
    return _with_reasoning(turn.thinking, reasoning, _pad(answer, min_chars))


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
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user":
            return _text_of(m.get("content")).strip()
    return ""


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _pad(text: str, min_chars: int) -> str:
    while len(text) < min_chars:
        text += " " + FILLER
    return text


def _min_chars(prompt: str) -> int:
    m = re.search(r"at least (\d[\d,]*)\s*(?:characters|chars|letters)", prompt, re.IGNORECASE)
    return int(m.group(1).replace(",", "")) if m else 0


def _sequence(prompt: str) -> str | None:
    m = re.search(r"every (?:integer|number) from (\d+) to (\d+)", prompt, re.IGNORECASE)
    if not m or int(m.group(2)) - int(m.group(1)) > 100_000:
        return None
    return " ".join(str(i) for i in range(int(m.group(1)), int(m.group(2)) + 1))


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOP_WORDS and len(w) > 1}


def _offered_functions(tools: list[dict[str, Any]], tool_choice: Any) -> list[dict[str, Any]]:
    functions = [t["function"] for t in tools if t.get("type", "function") == "function" and t.get("function")]
    if tool_choice == "none":
        return []
    if isinstance(tool_choice, dict):
        wanted = (tool_choice.get("function") or {}).get("name")
        return [f for f in functions if f.get("name") == wanted] or functions
    return functions


def _requested_count(prompt: str) -> int:
    lowered = prompt.lower()
    for word, n in _NUMBER_WORDS.items():
        if re.search(rf"\b{word}\b", lowered):
            return n
    m = re.search(r"\b([2-9])\s+(?:calls|times|tool calls|files|cities|places|items|searches|queries)\b", lowered)
    return int(m.group(1)) if m else 1


def _score(fn: dict[str, Any], prompt_words: set[str]) -> int:
    name_words = _words(fn.get("name", "").replace("_", " ").replace("-", " ").replace(".", " "))
    desc_words = _words(fn.get("description", "") or "")
    return 3 * len(name_words & prompt_words) + len(desc_words & prompt_words)


def _choose(functions: list[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    prompt_words = _words(prompt)
    scored = sorted(enumerate(functions), key=lambda p: (-_score(p[1], prompt_words), p[0]))
    matching = [fn for _, fn in scored if _score(fn, prompt_words) > 0]
    count = _requested_count(prompt)
    if count == 1 and len(matching) > 1 and re.search(r"\band\b", prompt.lower()):
        count = len(matching)
    pool = matching or [scored[0][1]]
    chosen = [pool[i % len(pool)] for i in range(count)] if len(pool) < count else pool[:count]
    if len({fn["name"] for fn in chosen}) == len(chosen):  # distinct tools: in the order the prompt names them
        chosen.sort(key=lambda fn: _anchor(fn, prompt))
    return chosen


def _anchor(fn: dict[str, Any], prompt: str) -> int:
    """Where the prompt first mentions one of the function's words (len(prompt) if nowhere)."""
    lowered = prompt.lower()
    words = _words(fn.get("name", "").replace("_", " ").replace("-", " ")) | _words(fn.get("description", "") or "")
    hits = [m.start() for w in words for m in re.finditer(rf"\b{re.escape(w)}", lowered)]
    return min(hits, default=len(prompt))


def _hints_per_call(chosen: list[dict[str, Any]], prompt: str) -> list[list[str]]:
    """String values for each call: distinct tools take the prompt values after their own mention; repeated calls of
    one tool take the prompt's values in turn ("weather for two cities: Paris and London")."""
    found = _candidates(prompt)
    if len({fn["name"] for fn in chosen}) < len(chosen) or len(chosen) == 1:
        return [found[i:] + found[:i] for i in range(len(chosen))]
    anchors = [_anchor(fn, prompt) for fn in chosen] + [len(prompt) + 1]
    hints = []
    for i in range(len(chosen)):
        own = [v for pos, v in _positioned(prompt) if anchors[i] <= pos < anchors[i + 1]]
        hints.append(own + [v for v in found if v not in own])
    return hints


_QUOTED = re.compile(r"\"([^\"]+)\"|`([^`]+)`|(?<!\w)'([^']+)'(?!\w)")
_PROPER = re.compile(r"(?<![.?!]\s)(?<=\s)([A-Z][A-Za-z]+)")  # capitalised, not the first word of a sentence


def _positioned(prompt: str) -> list[tuple[int, str]]:
    """Values the prompt offers for string arguments, with their positions: quoted text, capitalised words."""
    quoted = [(m.start(), next(g for g in m.groups() if g)) for m in _QUOTED.finditer(prompt)]
    spans = [(m.start(), m.end()) for m in _QUOTED.finditer(prompt)]
    proper = [(m.start(), m.group(1)) for m in _PROPER.finditer(prompt)
              if not any(a <= m.start() < b for a, b in spans)]
    return sorted(quoted + proper)


def _candidates(prompt: str) -> list[str]:
    """Quoted values first, then capitalised words (place names and the like)."""
    quoted = [next(g for g in m.groups() if g) for m in _QUOTED.finditer(prompt)]
    return quoted + [v for _, v in _positioned(prompt) if v not in quoted]


def _arguments(schema: dict[str, Any], prompt: str, hints: list[str], min_chars: int,
               sequence: str | None) -> dict[str, Any]:
    value = _value(schema if schema.get("type") else {**schema, "type": "object"}, "arguments", prompt, hints,
                   min_chars, top=True)
    if not isinstance(value, dict):
        return {}
    props = (schema.get("properties") or {})
    long_key = _long_text_key(props, list(value)) if sequence else None
    if long_key and long_key not in {"path", "file", "filename", "file_path"}:
        value[long_key] = sequence
    return value


def _value(schema: dict[str, Any], name: str, prompt: str, hints: list[str], min_chars: int, top: bool = False) -> Any:
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        mentioned = [e for e in schema["enum"]
                     if isinstance(e, str) and re.search(rf"\b{re.escape(e)}\b", prompt, re.I)]
        return mentioned[0] if mentioned else schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            branches = [b for b in schema[key] if b.get("type") != "null"] or schema[key]
            return _value(branches[0], name, prompt, hints, min_chars)
    if schema.get("allOf"):
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            merged.update(part)
        return _value(merged, name, prompt, hints, min_chars)
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object":
        props: dict[str, Any] = schema.get("properties") or {}
        required = [p for p in schema.get("required", []) if p in props]
        keys = required or list(props)[:1]
        long_key = _long_text_key(props, keys) if min_chars and top else None
        string_keys = [k for k in keys if (props[k].get("type") or "string") == "string" and not props[k].get("enum")]
        return {k: _value(props[k], k, prompt, hints[string_keys.index(k):] if k in string_keys else hints,
                          min_chars if k == long_key else 0) for k in keys}
    if kind == "array":
        items = schema.get("items") or {"type": "string"}
        count = max(1, int(schema.get("minItems", 1)))
        return [_value(items, name, prompt, hints[i:], 0) for i in range(count)]
    if kind == "integer":
        return _number(schema, prompt, integer=True)
    if kind == "number":
        return _number(schema, prompt, integer=False)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return _string(schema, name, prompt, hints, min_chars)


def _long_text_key(props: dict[str, Any], keys: list[str]) -> str | None:
    strings = [k for k in keys if (props[k].get("type") or "string") == "string" and not props[k].get("enum")]
    for preferred in ("content", "text", "body", "message", "code", "data"):
        if preferred in strings:
            return preferred
    return strings[0] if strings else None


def _number(schema: dict[str, Any], prompt: str, integer: bool) -> int | float:
    found = re.findall(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w.])", prompt)
    value: float = float(found[0]) if found else float(schema.get("minimum", schema.get("exclusiveMinimum", 0)) or 1)
    if "minimum" in schema:
        value = max(value, float(schema["minimum"]))
    if "maximum" in schema:
        value = min(value, float(schema["maximum"]))
    return int(value) if integer else value


def _string(schema: dict[str, Any], name: str, prompt: str, hints: list[str], min_chars: int) -> str:
    file_like = re.findall(r"(?<![\w/.])((?:[\w-]+/)*[\w-]+\.[A-Za-z0-9]{1,8})(?![\w/])", prompt)
    if name in {"path", "file", "filename", "file_path"} and file_like:
        value = file_like[0]
    elif hints:
        value = hints[0]
    elif name in {"pattern", "glob"}:
        value = "*"
    elif name in {"path", "directory", "dir", "file", "filename", "file_path"}:
        value = "."
    elif name in {"query", "q", "search", "text", "prompt", "question"}:
        value = _clip(prompt, 80) or name
    else:
        value = f"example {name}"
    value = _pad(value, max(min_chars, int(schema.get("minLength", 0))))
    if "maxLength" in schema:
        value = value[: int(schema["maxLength"])]
    return value
