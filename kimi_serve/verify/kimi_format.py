"""Kimi-K2.5's raw text format, without its tokenizer: the chat template rendered from the documented format, the raw
completion split into reasoning / content / tool calls, and the raw text rebuilt from the parsed API fields.

The prompt is the K2.5 template's shape (docs/raw-path.md): no separators, role token + name + ``<|im_middle|>``,
every turn closed by ``<|im_end|>``, a ``tool_declare`` system turn first when tools are offered (tools as compact
JSON, the template's own fallback; Kimi's Python tokenizer sends a TypeScript rendering instead), and the generation
prompt ``<|im_assistant|>assistant<|im_middle|><think>`` (``<think></think>`` with thinking off). Kimi's tokenizer
encodes each special string in this text as its one id, so the rendered text can go to ``/generate`` as ``text``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kimi_serve.verify.accumulate import MAX_TOOL_CALLS

THINK, THINK_END = "<think>", "</think>"
IM_USER, IM_ASSISTANT, IM_SYSTEM = "<|im_user|>", "<|im_assistant|>", "<|im_system|>"
IM_MIDDLE, IM_END = "<|im_middle|>", "<|im_end|>"
SECTION_BEGIN, SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CALL_BEGIN, ARG_BEGIN, CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"

THINK_ID, THINK_END_ID = 163606, 163607
EOS_ID, IM_END_ID = 163585, 163586
STOP_IDS = (IM_END_ID, EOS_ID)  # generation_config's <|im_end|> and config.json's [EOS]; SGLang stops on both
SECTION_BEGIN_ID = 163595
SPECIAL_IDS = {
    "[BOS]": 163584,
    "[EOS]": EOS_ID,
    IM_END: IM_END_ID,
    IM_USER: 163587,
    IM_ASSISTANT: 163588,
    IM_SYSTEM: 163594,
    SECTION_BEGIN: SECTION_BEGIN_ID,
    SECTION_END: 163596,
    CALL_BEGIN: 163597,
    ARG_BEGIN: 163598,
    CALL_END: 163599,
    IM_MIDDLE: 163601,
    THINK: THINK_ID,
    THINK_END: THINK_END_ID,
}
TOKEN_NAMES = {v: k for k, v in SPECIAL_IDS.items()}


def _content(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(p.get("text", "") for p in value if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _tool_calls(message: dict[str, Any]) -> str:
    calls = message.get("tool_calls") or []
    if not calls:
        return ""
    parts = [SECTION_BEGIN]
    for call in calls:
        args = call["function"]["arguments"]
        parts += [CALL_BEGIN, str(call["id"]), ARG_BEGIN, args if isinstance(args, str) else json.dumps(args), CALL_END]
    return "".join(parts + [SECTION_END])


def render_prompt(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, *, thinking: bool = True
) -> str:
    """The K2.5 chat template applied to ``messages`` (+ ``tools``) with the generation prompt."""
    last_plain = max(
        (i for i, m in enumerate(messages) if m.get("role") == "assistant" and not m.get("tool_calls")), default=-1
    )
    out: list[str] = []
    if tools:
        out.append(f"{IM_SYSTEM}tool_declare{IM_MIDDLE}{json.dumps(tools, separators=(',', ':'))}{IM_END}")
    for i, m in enumerate(messages):
        role = m.get("role", "user")
        name = m.get("name") or role
        if role == "user":
            out.append(f"{IM_USER}{name}{IM_MIDDLE}{_content(m.get('content'))}{IM_END}")
        elif role == "assistant":
            reasoning = "" if i <= last_plain or not thinking else (m.get("reasoning_content") or "")
            out.append(
                f"{IM_ASSISTANT}{name}{IM_MIDDLE}{THINK}{reasoning}{THINK_END}"
                f"{_content(m.get('content'))}{_tool_calls(m)}{IM_END}"
            )
        elif role == "tool":
            out.append(
                f"{IM_SYSTEM}{m.get('name') or 'tool'}{IM_MIDDLE}## Return of {m.get('tool_call_id')}\n"
                f"{_content(m.get('content'))}{IM_END}"
            )
        else:
            out.append(f"{IM_SYSTEM}{name}{IM_MIDDLE}{_content(m.get('content'))}{IM_END}")
    out.append(f"{IM_ASSISTANT}assistant{IM_MIDDLE}{THINK if thinking else THINK + THINK_END}")
    return "".join(out)


@dataclass
class RawCall:
    id: str
    arguments: str


@dataclass
class RawTurn:
    """A raw completion split the way Kimi writes it (thinking on: the text starts inside the reasoning)."""

    reasoning: str | None  # None: no ``</think>`` in the text
    content: str
    calls: list[RawCall] = field(default_factory=list)
    section: bool = False  # a tool-call section opened
    problems: list[str] = field(default_factory=list)  # what breaks Kimi's format


def _calls(body: str) -> list[RawCall]:
    """Each ``<|tool_call_begin|>ID<|tool_call_argument_begin|>ARGS<|tool_call_end|>`` in order, the shortest match
    each (as a lazy regular expression would find them, but in linear time: a text of 800 000 unfinished call
    openers made that search quadratic), at most MAX_TOOL_CALLS."""
    calls: list[RawCall] = []
    at = 0
    while len(calls) < MAX_TOOL_CALLS:
        start = body.find(CALL_BEGIN, at)
        arg = body.find(ARG_BEGIN, start + len(CALL_BEGIN)) if start >= 0 else -1
        end = body.find(CALL_END, arg + len(ARG_BEGIN)) if arg >= 0 else -1
        if end < 0:
            return calls
        calls.append(RawCall(body[start + len(CALL_BEGIN) : arg], body[arg + len(ARG_BEGIN) : end]))
        at = end + len(CALL_END)
    return calls


def parse_raw(text: str, *, thinking: bool = True) -> RawTurn:
    """Split Kimi's raw output: reasoning, ``</think>``, content, then an optional tool-call section."""
    reasoning: str | None = None
    rest = text
    if thinking and THINK_END in text:
        reasoning, rest = text.split(THINK_END, 1)
    elif not thinking and THINK_END in text:
        return RawTurn(None, text, problems=["</think> appears although thinking is off"])
    if SECTION_BEGIN not in rest:
        return RawTurn(reasoning, rest)
    content, section = rest.split(SECTION_BEGIN, 1)
    turn = RawTurn(reasoning, content, section=True)
    if SECTION_END not in section:
        turn.problems.append("the tool-call section is not closed by <|tool_calls_section_end|>")
    body, _, trailing = section.partition(SECTION_END)
    if trailing.strip():
        turn.problems.append(f"text after the tool-call section: {trailing[:60]!r}")
    turn.calls = _calls(body)
    if not turn.calls:
        turn.problems.append("the tool-call section holds no complete <|tool_call_begin|>...<|tool_call_end|>")
    return turn


def rebuild_raw(
    reasoning: str | None, content: str | None, tool_calls: list[dict[str, Any]], *, thinking: bool = True
) -> str:
    """Kimi's raw text from the parsed fields (``reasoning_content``, ``content``, ``tool_calls``).

    Without a reasoning parser (``reasoning`` is None) the content carries the raw text, ``</think>`` included."""
    head = f"{reasoning}{THINK_END}" if thinking and reasoning is not None else ""
    fns = [(call.get("id"), call.get("function")) for call in tool_calls]
    calls = [{"id": i, "function": f} for i, f in fns if isinstance(f, dict) and f.get("arguments") is not None]
    return head + (content or "") + _tool_calls({"tool_calls": calls})


def first_difference(expected: Sequence[Any], actual: Sequence[Any]) -> int | None:
    """Index of the first differing character (or token id), or None when the two are equal."""
    if expected == actual:
        return None
    pairs = enumerate(zip(expected, actual, strict=False))
    return next((i for i, (a, b) in pairs if a != b), min(len(expected), len(actual)))


def describe_difference(raw: str, rebuilt: str) -> str:
    """Where and how the rebuilt text departs from the raw one, in one line."""
    at = first_difference(raw, rebuilt)
    if at is None:
        return "identical"
    lo = max(0, at - 24)
    kind = "differs"
    if "".join(raw.split()) == "".join(rebuilt.split()):
        kind = "differs in whitespace only (a parser stripped or added spaces/newlines)"
    elif rebuilt in raw:
        kind = f"lacks {len(raw) - len(rebuilt)} characters of the raw text (a fragment was lost)"
    elif any(tok in raw[at : at + 40] and tok not in rebuilt[at : at + 40] for tok in SPECIAL_IDS):
        kind = "lost a special token"
    return f"character {at} of {len(raw)} {kind}: raw {raw[lo : at + 24]!r} vs rebuilt {rebuilt[lo : at + 24]!r}"


def id_name(token_id: int | None) -> str:
    if token_id is None:
        return "the end"
    name = TOKEN_NAMES.get(token_id)
    return f"{token_id} ({name})" if name else str(token_id)
