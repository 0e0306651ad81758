"""Server-sent events -> :class:`Answer`: content, reasoning and tool-call fragments (by index) reassembled."""

from __future__ import annotations

import json
from typing import Any

from kimi_serve.core.findings import Finding
from kimi_serve.verify.answer import OTHER_REASONING_FIELDS, Answer, ToolCall, as_object
from kimi_serve.verify.report import problem

_SHOW = 160


def _events(body: bytes) -> list[str]:
    """The ``data:`` payloads of an SSE body, in order (multi-line data joined with newlines)."""
    events: list[str] = []
    data: list[str] = []
    for line in body.decode("utf-8", errors="replace").splitlines():
        if not line.strip():
            if data:
                events.append("\n".join(data))
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        events.append("\n".join(data))
    return events


def _append(current: str | None, piece: Any) -> str | None:
    if isinstance(piece, str):
        return (current or "") + piece
    return current


def _apply_tool_delta(calls: dict[int, ToolCall], delta: Any, problems: list[Finding]) -> None:
    if not isinstance(delta, dict):
        return
    index = delta.get("index")
    if not isinstance(index, int):
        if not any(p.code == "stream_tool_index" for p in problems):
            problems.append(problem("stream_tool_index", "a streamed tool-call delta has no integer `index`",
                                    "clients reassemble calls by index; serve with SGLang's kimi_k2 tool parser"))
        index = max(calls) if calls else 0
    call = calls.setdefault(index, ToolCall(index=index))
    if isinstance(delta.get("id"), str) and delta["id"] and not call.id:
        call.id = delta["id"]
    if isinstance(delta.get("type"), str) and not call.type:
        call.type = delta["type"]
    fn = as_object(delta.get("function"))
    if isinstance(fn.get("name"), str) and fn["name"] and not call.name:
        call.name = fn["name"]
    call.arguments = _append(call.arguments, fn.get("arguments"))


def answer_from_sse(body: bytes, *, timed_out: bool = False, cut: bool = False) -> Answer:
    """Reassemble a streamed chat completion and record what is wrong with the stream itself."""
    answer = Answer()
    calls: dict[int, ToolCall] = {}
    done = False
    events = _events(body)
    if not events and body.strip():
        answer.problems.append(problem(
            "stream_not_sse", f"stream=true answered with a non-SSE body: {body[:_SHOW].decode('utf-8', 'replace')!r}",
            "point --host at SGLang's OpenAI server; a proxy in between must pass server-sent events through"))
        return answer
    for data in events:
        if data.strip() == "[DONE]":
            done = True
            continue
        try:
            chunk = json.loads(data)
        except ValueError:
            answer.problems.append(problem("stream_bad_chunk", f"a stream chunk is not JSON: {data[:_SHOW]!r}",
                                           "check the server log for the request; the stream is corrupt"))
            continue
        if isinstance(chunk, dict) and chunk.get("error"):
            err = chunk["error"]
            text = err.get("message", err) if isinstance(err, dict) else err
            answer.problems.append(problem("stream_error", f"the server sent an error mid-stream: {str(text)[:_SHOW]}",
                                           "read the SGLang log for this request"))
            continue
        for choice in (chunk.get("choices") or []) if isinstance(chunk, dict) else []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = as_object(choice.get("delta"))
            answer.content = _append(answer.content, delta.get("content"))
            answer.reasoning = _append(answer.reasoning, delta.get("reasoning_content"))
            for name in OTHER_REASONING_FIELDS:
                if isinstance(delta.get(name), str) and delta[name]:
                    answer.other_reasoning[name] = answer.other_reasoning.get(name, "") + delta[name]
            for tool_delta in delta.get("tool_calls") or []:
                _apply_tool_delta(calls, tool_delta, answer.problems)
            if isinstance(choice.get("finish_reason"), str):
                answer.finish_reason = choice["finish_reason"]
    answer.tool_calls = [calls[i] for i in sorted(calls)]
    if timed_out:
        answer.problems.append(problem(
            "timeout", f"the stream stalled: no [DONE] before the deadline ({len(events)} events received)",
            "the server hangs mid-generation; read its log, or raise --timeout if it is only slow"))
    elif not done:
        how = "the connection broke" if cut else "the stream ended"
        answer.problems.append(problem("stream_no_done", f"{how} without `data: [DONE]` ({len(events)} events)",
                                       "the stream is truncated; read the SGLang log for an error on this request"))
    if answer.finish_reason is None and not timed_out:
        answer.problems.append(problem("stream_no_finish_reason", "no chunk carried a finish_reason",
                                       "the stream is truncated or the server is not SGLang's OpenAI server"))
    return answer
