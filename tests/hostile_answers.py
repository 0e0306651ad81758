"""Answers built to cost verify time or memory while they stay inside its read limits (docs/verify.md "Read
limits"), for tests/test_verify_budget.py and benchmarks/bench_verify_floods.py. Each kind is a ``rewrite`` hook for
the stand-in (tests/contract_server.py, not SGLang): the chat answers of the kind's mode (plain, streamed or both)
are replaced by the hostile bytes; everything else (/health, /v1/models, ...) stays correct.

- ``brackets``: 200 KB of ``[`` as every chat answer (JSON and event stream alike: no line end, no closing bracket);
- ``tool-calls``: a plain answer with 110 000 tool calls (~11 MiB);
- ``big-deltas``: streams of 1 000-character content deltas, just under 16 MiB a stream;
- ``deltas``: streams of 99 000 one-delta chunks;
- ``deep``: a plain answer with a value nested 100 000 deep, and a stream chunk nested as deep;
- ``comments``: a stream of 16 MiB of comment keep-alives around one chunk;
- ``big-arguments``: streams of 56 tool calls whose arguments hold 99 000 values each (~16 MiB).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from contract_server import Rewrite

MIB = 1024 * 1024
HEAD = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "kimi-k2.5"}
KINDS = ("brackets", "tool-calls", "big-deltas", "deltas", "deep", "comments", "big-arguments")


def _event(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return b"data: " + json.dumps({**HEAD, "choices": [choice]}).encode() + b"\n\n"


_FN = {"name": "get_weather"}
_START, _END = _event({"role": "assistant", "content": ""}), b"data: [DONE]\n\n"


def _tool_calls(n: int) -> bytes:
    call = '{"id": "c%d", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}'
    calls = ", ".join(call % i for i in range(n))
    message = '{"role": "assistant", "content": null, "tool_calls": [' + calls + "]}"
    return (
        '{"id": "x", "object": "chat.completion", "created": 0, "model": "kimi-k2.5", "choices": [{"index": 0, '
        '"message": ' + message + ', "finish_reason": "tool_calls"}]}'
    ).encode()


@functools.cache
def answer(kind: str, stream: bool) -> bytes | None:
    """The hostile bytes of ``kind`` for a streamed or plain chat answer; None: the stand-in's own answer."""
    if kind == "brackets":
        return b"[" * 200_000
    if kind == "tool-calls":
        return None if stream else _tool_calls(110_000)
    if kind == "big-deltas":
        delta = _event({"content": "x" * 1000})
        n = (16 * MIB - 4096) // len(delta)
        return _START + delta * n + _event({}, "stop") + _END if stream else None
    if kind == "deltas":
        return _START + _event({"content": "x"}) * 99_000 + _event({}, "stop") + _END if stream else None
    if kind == "deep":
        nested = b"[" * 100_000 + b"]" * 100_000
        if stream:
            return _START + b"data: " + nested + b"\n\n" + _event({}, "stop") + _END
        return b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": ' + nested + b"}}]}"
    if kind == "comments":
        return (
            _START + b":\n" * (8 * MIB - 1024) + _event({"content": "hi"}) + _event({}, "stop") + _END
            if stream
            else None
        )
    if kind == "big-arguments":
        arguments = json.dumps({"city": "Paris", "x": [1] * 99_000})
        calls = (
            _event(
                {
                    "tool_calls": [
                        {"index": i, "id": f"c{i}", "type": "function", "function": {**_FN, "arguments": arguments}}
                    ]
                }
            )
            for i in range(56)
        )
        return _START + b"".join(calls) + _event({}, "tool_calls") + _END if stream else None
    raise ValueError(f"unknown kind {kind!r}")


def rewrite(kind: str) -> Rewrite:
    """The stand-in's ``rewrite`` hook that serves ``kind`` (:data:`KINDS`) as its chat answers."""

    def _rewrite(path: str, status: int, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        if path != "/v1/chat/completions" or status != 200:
            return status, headers, body
        stream = "event-stream" in headers.get("Content-Type", "")
        hostile = answer(kind, stream)
        return (status, headers, body) if hostile is None else (status, headers, hostile)

    return _rewrite
