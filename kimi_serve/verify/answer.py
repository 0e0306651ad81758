"""One assistant turn in a shape both wire forms reduce to, so every rule applies to streamed and plain answers
alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kimi_serve.core.findings import Finding
from kimi_serve.verify.accumulate import MAX_TOOL_CALLS
from kimi_serve.verify.draft import SpecSample, spec_sample
from kimi_serve.verify.report import problem

# Fields other stacks use for reasoning; SGLang's (and the contract's) field is reasoning_content.
OTHER_REASONING_FIELDS = ("reasoning", "thinking", "reasoning_text")


@dataclass
class ToolCall:
    id: str | None = None
    type: str | None = None
    index: int | None = None
    name: str | None = None
    arguments: str | None = None
    arguments_kind: str = "string"  # the JSON type the wire carried ("object" when a proxy decoded it)


@dataclass
class Answer:
    content: str | None = None
    reasoning: str | None = None  # message.reasoning_content
    other_reasoning: dict[str, str] = field(default_factory=dict)
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    problems: list[Finding] = field(default_factory=list)  # wire-level problems (shape, stream truncation)
    warnings: list[Finding] = field(default_factory=list)  # wire faults a client survives
    spec: SpecSample | None = None  # the acceptance SGLang reported for this answer (sglext.spec_tokens_details)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def json_kind(value: Any) -> str:
    """The JSON type name of a decoded value ("string", "object", "array", "number", "boolean", "null")."""
    if isinstance(value, bool):
        return "boolean"
    return {str: "string", dict: "object", list: "array", int: "number", float: "number", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def json_int(value: Any) -> int | None:
    """``value`` when it is a JSON integer (not a boolean), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_object(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (wire data is untrusted)."""
    return value if isinstance(value, dict) else {}


def message_answer(message: dict[str, Any], **fields: Any) -> Answer:
    """The text a message carries (content, reasoning_content, other stacks' reasoning fields) and ``fields``."""
    answer = Answer(content=_text(message.get("content")), reasoning=_text(message.get("reasoning_content")), **fields)
    answer.other_reasoning = {name: message[name] for name in OTHER_REASONING_FIELDS if _text(message.get(name))}
    return answer


def tool_call(raw: Any, index: int | None = None) -> ToolCall:
    """One tool call of a message, streamed or not (``index``: the call's place, where the wire gives none)."""
    raw = as_object(raw)
    fn = as_object(raw.get("function"))
    given = raw.get("index")
    return ToolCall(
        id=_text(raw.get("id")),
        type=_text(raw.get("type")),
        index=given if isinstance(given, int) else index,
        name=_text(fn.get("name")),
        arguments=_text(fn.get("arguments")),
        arguments_kind=json_kind(fn.get("arguments")),
    )


def _malformed(what: str) -> Finding:
    return problem(
        "malformed_response",
        f"response is not an OpenAI chat completion: {what}",
        "point --host at SGLang's OpenAI server (/v1/chat/completions), not a proxy that rewrites it",
    )


def answer_from_json(obj: Any) -> Answer:
    """Reduce a non-streamed ``chat.completion`` object."""
    if not isinstance(obj, dict) or not isinstance(obj.get("choices"), list) or not obj["choices"]:
        return Answer(problems=[_malformed("no choices")])
    choice = obj["choices"][0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        return Answer(problems=[_malformed("choices[0] has no message")])
    answer = message_answer(message, finish_reason=_text(choice.get("finish_reason")), spec=spec_sample(obj))
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        answer.problems.append(_malformed("message.tool_calls is not a list"))
        raw_calls = []
    if len(raw_calls) > MAX_TOOL_CALLS:
        answer.problems.append(
            problem(
                "too_many_tool_calls",
                f"message.tool_calls holds {len(raw_calls)} calls, more than the {MAX_TOOL_CALLS} verify judges: "
                "an endless or runaway answer",
                "read the server log for this request; check that --host is SGLang's OpenAI server",
            )
        )
        raw_calls = raw_calls[:MAX_TOOL_CALLS]
    answer.tool_calls = [tool_call(raw) for raw in raw_calls]
    return answer
