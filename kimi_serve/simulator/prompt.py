"""The scripted model reading its prompt: a rendered Kimi-K2.5 chat prompt (``/generate``, ``/v1/completions``) turned
back into messages and tools (the ``tool_declare`` turn as JSON, or Kimi's TypeScript form read best effort), so the
raw path answers like the chat path. Text with no role tokens is one user message. Pure Python.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kimi_serve.simulator.model import ARG_BEGIN, CALL_BEGIN, CALL_END, SECTION_BEGIN, THINK_END

_ROLE = re.compile(r"(<\|im_user\|>|<\|im_assistant\|>|<\|im_system\|>)")
_ROLES = {"<|im_user|>": "user", "<|im_assistant|>": "assistant", "<|im_system|>": "system"}
_MIDDLE, _END = "<|im_middle|>", "<|im_end|>"
CALL = re.compile(re.escape(CALL_BEGIN) + r"(.*?)" + re.escape(ARG_BEGIN) + r"(.*?)" + re.escape(CALL_END), re.S)
_TS_FUNCTION = re.compile(r"((?:^//[^\n]*\n)*)^type (\w[\w.\-]*) = \(_: \{(.*?)^\}\) => any;", re.S | re.M)
_TS_FIELD = re.compile(r"^  (\w+)(\??): ([^,\n]+)", re.M)


def _ts_type(text: str) -> dict[str, Any]:
    text = text.strip().rstrip(",")
    enum = re.findall(r'"([^"]*)"', text)
    if enum and all(part.strip().startswith('"') for part in text.split("|")):
        return {"type": "string", "enum": enum}
    if text in ("string", "number", "integer", "boolean"):
        return {"type": text}
    return {"type": "array"} if text.endswith("[]") else {"type": "string"}


def _typescript_tools(text: str) -> list[dict[str, Any]]:
    tools = []
    for m in _TS_FUNCTION.finditer(text):
        description = " ".join(line[3:] for line in m.group(1).splitlines())
        props, required = {}, []
        for field in _TS_FIELD.finditer(m.group(3)):
            props[field.group(1)] = _ts_type(field.group(3))
            if not field.group(2):
                required.append(field.group(1))
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": m.group(2),
                    "description": description,
                    "parameters": {"type": "object", "properties": props, "required": required},
                },
            }
        )
    return tools


def _declared_tools(body: str) -> list[dict[str, Any]]:
    try:
        tools = json.loads(body)
    except ValueError:
        return _typescript_tools(body)
    return [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []


def _assistant(body: str) -> dict[str, Any]:
    text = body.split(THINK_END, 1)[1] if THINK_END in body else body
    content, _, section = text.partition(SECTION_BEGIN)
    calls = [
        {
            "id": m.group(1),
            "type": "function",
            "function": {"name": m.group(1).split(".", 1)[-1].rsplit(":", 1)[0], "arguments": m.group(2)},
        }
        for m in CALL.finditer(section)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return message


def read_prompt(text: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(messages, tools) of a rendered Kimi prompt; the generation prompt at the end is not a message."""
    parts = _ROLE.split(text)
    if len(parts) == 1:
        return [{"role": "user", "content": text}], []
    messages: list[dict[str, Any]] = []
    tools: list[dict[str, Any]] = []
    for token, chunk in zip(parts[1::2], parts[2::2], strict=True):
        if _END not in chunk:
            continue  # the open generation prompt
        head, _, rest = chunk.partition(_MIDDLE)
        body = rest.split(_END, 1)[0]
        role = _ROLES[token]
        if role == "system" and head == "tool_declare":
            tools = _declared_tools(body)
        elif role == "system" and body.startswith("## Return of "):
            call_id, _, result = body[len("## Return of ") :].partition("\n")
            messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
        elif role == "assistant":
            messages.append(_assistant(body))
        else:
            messages.append({"role": role, "content": body})
    return messages, tools
