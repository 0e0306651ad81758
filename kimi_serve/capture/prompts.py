"""The prompts file of `capture` (and of `bench --workload FILE`): one chat request a line, pure.

A line is an OpenAI chat request (``messages``, optional ``tools``, ``tool_choice``, the thinking switches, sampling
fields, an optional ``id``) or a ShareGPT row (``conversations`` of ``{from, value}`` or ``{role, content}``; the
conversation up to its last user or tool turn is sent, a trailing answer is dropped: the served model writes its own).
The thinking switch Kimi reads is ``chat_template_kwargs.thinking``; a top-level ``thinking`` or ``enable_thinking``
(SpecForge's switch, which Kimi's template ignores) is moved there. A bad line is one :class:`PromptError` naming the
file, the line and the key, and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimi_serve.core.inputs import InputBoundError, load_json, read_text

MAX_PROMPTS_BYTES = 256 * 1024 * 1024  # as bench's workload file
MAX_ID_CHARS = 200
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}
SHAREGPT_ROLES |= {"tool": "tool", "function": "tool", "observation": "tool"}
# what a line may carry besides messages: the request fields a chat client sends (others are a typo or a field of
# another server, refused so a capture never runs on a switch the server ignores)
SAMPLING = frozenset(
    {
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "max_tokens",
        "max_completion_tokens",
        "seed",
        "stop",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
    }
)
REQUEST_KEYS = SAMPLING | {"tools", "tool_choice", "parallel_tool_calls", "chat_template_kwargs", "model"}
META_KEYS = frozenset({"id", "thinking", "enable_thinking", "messages", "conversations"})
FORM = (
    'one JSON object a line: {"id": "a1", "messages": [{"role": "user", "content": "..."}], "tools": [...], '
    '"thinking": true, "temperature": 1.0, "max_tokens": 4096}, or a ShareGPT row {"id": ..., "conversations": '
    '[{"from": "human", "value": "..."}]} (docs/capture.md)'
)


class PromptError(ValueError):
    """One bad line: ``where`` is ``FILE:LINE`` (the key after it when one is to blame), ``hint`` the fix."""

    def __init__(self, where: str, message: str, hint: str = FORM) -> None:
        super().__init__(f"{where}: {message}")
        self.where, self.hint = where, hint


@dataclass(frozen=True)
class Prompt:
    id: str
    line: int
    body: dict[str, Any]  # the chat request without model and the id options (run.py adds them)

    @property
    def thinking(self) -> bool:
        kwargs = self.body.get("chat_template_kwargs") or {}
        return kwargs.get("thinking", True) is not False


def _messages_of_sharegpt(rows: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(rows, list) or not rows:
        raise PromptError(f"{where}: conversations", "is not a non-empty list of turns")
    out = []
    for i, turn in enumerate(rows):
        if not isinstance(turn, dict):
            raise PromptError(f"{where}: conversations[{i}]", "is not an object")
        who = turn.get("from", turn.get("role"))
        role = SHAREGPT_ROLES.get(who) if isinstance(who, str) else None
        if role is None:
            raise PromptError(
                f"{where}: conversations[{i}].from",
                f"{who!r} is not a ShareGPT speaker",
                f"use one of {', '.join(sorted(SHAREGPT_ROLES))}",
            )
        message = {k: v for k, v in turn.items() if k not in ("from", "value")}
        message["role"] = role
        message["content"] = turn.get("value", turn.get("content"))
        out.append(message)
    while out and out[-1]["role"] == "assistant":  # the recorded answer: the served model writes its own
        out.pop()
    return out


def _check_messages(messages: Any, where: str) -> None:
    if not isinstance(messages, list) or not messages:
        raise PromptError(f"{where}: messages", "is not a non-empty list of messages")
    for i, m in enumerate(messages):
        at = f"{where}: messages[{i}]"
        if not isinstance(m, dict):
            raise PromptError(at, "is not an object")
        if m.get("role") not in ROLES:
            raise PromptError(f"{at}.role", f"{m.get('role')!r} is not a chat role", f"use {', '.join(sorted(ROLES))}")
        content = m.get("content")
        if not (content is None or isinstance(content, (str, list))):
            raise PromptError(f"{at}.content", "is neither text nor a list of parts")
        if m["role"] == "tool" and not isinstance(m.get("tool_call_id"), str):
            raise PromptError(
                f"{at}.tool_call_id",
                "a tool result without the id of the call it answers",
                "copy the id of the assistant's tool call (functions.NAME:N as the server wrote it)",
            )
        calls = m.get("tool_calls")
        if calls is not None and (m["role"] != "assistant" or not isinstance(calls, list)):
            raise PromptError(f"{at}.tool_calls", "only an assistant turn carries tool_calls, as a list")
    if messages[-1]["role"] not in ("user", "tool"):
        raise PromptError(
            f"{where}: messages[{len(messages) - 1}].role",
            f"the conversation ends with a {messages[-1]['role']} turn: nothing for the model to answer",
            "end each conversation with the user turn or the tool result the model answers",
        )


def _switches(row: dict[str, Any], body: dict[str, Any], where: str) -> None:
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise PromptError(f"{where}: chat_template_kwargs", "is not an object")
    kwargs = dict(kwargs or {})
    for key in ("thinking", "enable_thinking"):
        if key in row:
            if not isinstance(row[key], bool):
                raise PromptError(f"{where}: {key}", f"{row[key]!r} is not true or false")
            kwargs["thinking"] = row[key]
    if "enable_thinking" in kwargs:  # not Kimi's switch: its template reads `thinking`
        kwargs.setdefault("thinking", kwargs.pop("enable_thinking"))
    if kwargs:
        body["chat_template_kwargs"] = kwargs


def parse_line(row: Any, where: str, line: int) -> Prompt:
    """One line's request (``where``: ``FILE:LINE``)."""
    if not isinstance(row, dict):
        raise PromptError(where, f"a JSON {type(row).__name__}, not an object")
    unknown = sorted(set(row) - REQUEST_KEYS - META_KEYS)
    if unknown:
        raise PromptError(
            f"{where}: {unknown[0]}",
            f"unknown key {unknown[0]!r}",
            "a line holds messages (or conversations), id, thinking and request fields "
            f"({', '.join(sorted(REQUEST_KEYS))})",
        )
    if ("messages" in row) == ("conversations" in row):
        raise PromptError(where, "needs exactly one of messages or conversations")
    messages = row["messages"] if "messages" in row else _messages_of_sharegpt(row["conversations"], where)
    _check_messages(messages, where)
    ident = row.get("id", f"line-{line}")
    if isinstance(ident, int) and not isinstance(ident, bool):
        ident = str(ident)
    if not isinstance(ident, str) or not ident or len(ident) > MAX_ID_CHARS or not ident.isprintable():
        raise PromptError(f"{where}: id", f"{ident!r} is not a printable text id of 1..{MAX_ID_CHARS} characters")
    body = {k: v for k, v in row.items() if k in REQUEST_KEYS}
    body["messages"] = messages
    if body.get("tools") is not None and not isinstance(body["tools"], list):
        raise PromptError(f"{where}: tools", "is not a list of tool objects")
    _switches(row, body, where)
    return Prompt(ident, line, body)


def parse_prompts(text: str, name: str) -> list[Prompt]:
    """Every prompt of the file's text, in order; ids unique (a PromptError at the first bad line)."""
    prompts: list[Prompt] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        where = f"{name}:{number}"
        try:
            row = load_json(raw)
        except InputBoundError as exc:
            raise PromptError(where, str(exc), exc.hint) from None
        except ValueError as exc:
            raise PromptError(where, f"not JSON ({exc})") from None
        prompt = parse_line(row, where, number)
        if prompt.id in seen:
            raise PromptError(
                f"{where}: id",
                f"id {prompt.id!r} is also on line {seen[prompt.id]}",
                "give every prompt its own id: the output holds one record per id",
            )
        seen[prompt.id] = number
        prompts.append(prompt)
    if not prompts:
        raise PromptError(f"{name}:1", "no prompt in the file")
    return prompts


def read_prompts(path: Path) -> list[Prompt]:
    """The prompts file (a regular file of at most MAX_PROMPTS_BYTES, UTF-8): PromptError for a bad line, OSError or
    InputBoundError for the file itself."""
    try:
        text = read_text(path, MAX_PROMPTS_BYTES)
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise PromptError(f"{path}:{line}", "not UTF-8 text", "save the file as UTF-8") from None
    return parse_prompts(text, str(path))


def as_openai_rows(prompts: list[Prompt]) -> str:
    """The prompts as bench_serving's ``openai`` dataset (one request a line: messages and request fields), for
    `bench --workload FILE` on a capture's prompts file."""
    import json

    return "".join(json.dumps(p.body, sort_keys=True) + "\n" for p in prompts)
