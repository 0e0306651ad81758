"""Server-sent events -> :class:`Answer`: content, reasoning and tool-call fragments (by index) reassembled."""

from __future__ import annotations

import json
from typing import Any

from kimi_serve.core.findings import Finding
from kimi_serve.verify.accumulate import Merge, merge_delta
from kimi_serve.verify.answer import OTHER_REASONING_FIELDS, Answer, ToolCall, as_object, json_kind
from kimi_serve.verify.report import problem, warning

_SHOW = 160
# No bytes for this long: the stream is stalled (the transport stops it). One that keeps sending is only slow.
STALL_SECONDS = 30.0


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


_CHUNK_OBJECT = "chat.completion.chunk"
_FIX_WIRE = (
    "SGLang's own stream has this shape right; a proxy or another server in between rewrites the chunks: "
    "point --host at SGLang itself or configure the proxy to pass server-sent events through unchanged"
)


def _carries_data(choices: Any) -> bool:
    return isinstance(choices, list) and any(
        isinstance(c, dict) and (as_object(c.get("delta")) or c.get("finish_reason")) for c in choices
    )


def _check_tool_lookup(delta: dict[str, Any], message: dict[str, Any], merge: Merge) -> None:
    """The SDK looks every tool-call delta up by its index after merging a chunk (``tool_calls[delta.index]``)."""
    stored = message.get("tool_calls")
    for entry in delta.get("tool_calls") or [] if isinstance(delta.get("tool_calls"), list) else []:
        index = entry.get("index") if isinstance(entry, dict) else None
        if not isinstance(index, int) or isinstance(index, bool):
            merge.add(
                "stream_tool_index",
                f"a streamed tool-call delta has index {index!r}, not an integer: the "
                "openai SDK cannot place it (TypeError) and the stream is lost",
            )
        elif not isinstance(stored, list) or index >= len(stored):
            merge.add(
                "stream_tool_index",
                f"a streamed tool-call delta has index {index} but only "
                f"{len(stored) if isinstance(stored, list) else 0} call(s) exist: the openai SDK raises "
                "IndexError; indices must count up from 0",
            )


def _tool_call(raw: Any, position: int) -> ToolCall:
    raw = as_object(raw)
    fn = as_object(raw.get("function"))
    arguments = fn.get("arguments")
    index = raw.get("index")
    return ToolCall(
        id=raw["id"] if isinstance(raw.get("id"), str) else None,
        type=raw["type"] if isinstance(raw.get("type"), str) else None,
        index=index if isinstance(index, int) else position,
        name=fn["name"] if isinstance(fn.get("name"), str) else None,
        arguments=arguments if isinstance(arguments, str) else None,
        arguments_kind=json_kind(arguments),
    )


def stall_limit(timeout: float) -> float:
    """Seconds without a byte that make a stream "stalled": STALL_SECONDS, or half the timeout when that is shorter."""
    return min(STALL_SECONDS, timeout / 2)


def _stall_problem(events: int, stalled: bool, idle_s: float | None, stall_s: float | None) -> Finding:
    if stalled:
        return problem(
            "timeout",
            f"the stream stalled: no bytes for {stall_s or 0:g}s after {events} events",
            "the server hangs mid-generation; read its log",
        )
    if stall_s is not None and idle_s is not None:
        return problem(
            "too_slow",
            f"the stream was still arriving when the time ran out ({events} events; the last "
            f"byte {idle_s:.1f}s before the deadline, no pause reached the {stall_s:g}s stall limit): the "
            "server is slow, not hung",
            "raise the profile's verify.timeout (or --timeout) if this speed is expected; else read the "
            "server's decode speed in its log",
        )
    return problem(
        "timeout",
        f"the stream did not finish before the deadline ({events} events received)",
        "the server hangs or is slow; read its log, or raise --timeout",
    )


def answer_from_sse(
    body: bytes,
    *,
    timed_out: bool = False,
    cut: bool = False,
    stalled: bool = False,
    idle_s: float | None = None,
    stall_s: float | None = None,
) -> Answer:
    """Reassemble a streamed chat completion as the openai SDK does and record what is wrong with the stream itself.

    ``timed_out``/``stalled``/``idle_s``/``stall_s``: how reading ended (transport.Reply), to tell a hung stream
    (no bytes for ``stall_s``) from a slow one (still arriving at the deadline).
    """
    answer = Answer()
    merge = Merge()
    message: dict[str, Any] = {}
    done = False
    events = _events(body)
    if not events and body.strip():
        answer.problems.append(
            problem(
                "stream_not_sse",
                f"stream=true answered with a non-SSE body: {body[:_SHOW].decode('utf-8', 'replace')!r}",
                "point --host at SGLang's OpenAI server; a proxy in between must pass server-sent events through",
            )
        )
        return answer
    for data in events:
        if data.strip().startswith("[DONE]"):
            done = True
            break  # the SDK stops reading here
        try:
            chunk = json.loads(data)
        except ValueError:
            answer.problems.append(
                problem(
                    "stream_bad_chunk",
                    f"a stream chunk is not JSON: {data[:_SHOW]!r}",
                    "check the server log for the request; the stream is corrupt",
                )
            )
            continue
        if isinstance(chunk, dict) and chunk.get("error"):
            err = chunk["error"]
            text = err.get("message", err) if isinstance(err, dict) else err
            answer.problems.append(
                problem(
                    "stream_error",
                    f"the server sent an error mid-stream: {str(text)[:_SHOW]}",
                    "read the SGLang log for this request",
                )
            )
            continue
        if not isinstance(chunk, dict):
            answer.problems.append(
                problem(
                    "stream_bad_chunk",
                    f"a stream chunk is not a JSON object: {data[:_SHOW]!r}",
                    "check the server log for the request; the stream is corrupt",
                )
            )
            continue
        choices = chunk.get("choices") or []
        if chunk.get("object") != _CHUNK_OBJECT:
            if _carries_data(choices):
                merge.add(
                    "stream_chunk_object",
                    f"a chunk with data has object {chunk.get('object')!r}, not "
                    f"{_CHUNK_OBJECT!r}: the openai SDK's stream helper skips such chunks, so their text is lost",
                )
            continue
        for choice in choices if isinstance(choices, list) else []:
            choice = as_object(choice)
            index = choice.get("index")
            if not isinstance(index, int) or isinstance(index, bool):
                merge.add(
                    "stream_choice_index",
                    f"a stream choice has index {index!r}, not an integer: the openai "
                    "SDK cannot place it (TypeError) and the stream is lost",
                )
                index = 0
            if index != 0:
                continue
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                if delta is not None or not choice.get("finish_reason"):
                    merge.add("stream_no_delta", f"a stream choice has no `delta` object ({delta!r})")
            else:
                merge_delta(message, delta, "delta", merge)
                _check_tool_lookup(delta, message, merge)
            if isinstance(choice.get("finish_reason"), str) and choice["finish_reason"]:
                answer.finish_reason = choice["finish_reason"]
    answer.problems += [problem(code, text, _FIX_WIRE) for code, text in merge.faults]
    answer.content = message.get("content") if isinstance(message.get("content"), str) else None
    answer.reasoning = message.get("reasoning_content") if isinstance(message.get("reasoning_content"), str) else None
    for name in OTHER_REASONING_FIELDS:
        if isinstance(message.get(name), str) and message[name]:
            answer.other_reasoning[name] = message[name]
    raw_calls = message.get("tool_calls")
    answer.tool_calls = [_tool_call(c, i) for i, c in enumerate(raw_calls if isinstance(raw_calls, list) else [])]
    if message.get("role") is None and answer.finish_reason and not merge.faults and not timed_out:
        answer.problems.append(
            problem(
                "stream_no_role",
                'no chunk carried `role: "assistant"`: the openai SDK\'s '
                "message has role None, which a client cannot send back as history",
                _FIX_WIRE,
            )
        )
    if timed_out:
        answer.problems.append(_stall_problem(len(events), stalled, idle_s, stall_s))
    elif not done and (cut or answer.finish_reason is None):
        how = "the connection broke" if cut else "the stream ended"
        answer.problems.append(
            problem(
                "stream_no_done",
                f"{how} without `data: [DONE]` ({len(events)} events)",
                "the stream is truncated; read the SGLang log for an error on this request",
            )
        )
    elif not done:
        answer.warnings.append(
            warning(
                "stream_no_done",
                f"the stream ended cleanly after finish_reason "
                f"{answer.finish_reason!r} but without `data: [DONE]`: the openai SDK reads it "
                "whole, clients that wait for [DONE] hang",
                _FIX_WIRE,
            )
        )
    if answer.finish_reason is None and not timed_out:
        answer.problems.append(
            problem(
                "stream_no_finish_reason",
                "no chunk carried a finish_reason",
                "the stream is truncated or the server is not SGLang's OpenAI server",
            )
        )
    return answer
