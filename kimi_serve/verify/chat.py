"""`kimi-serve chat`: one turn over the OpenAI chat completions API, streamed and shown as it arrives (docs/verify.md,
"chat"). The answer goes to stdout, the reasoning apart on stderr (dim on a terminal, else each block headed
``[reasoning]``), tool calls as their name and JSON arguments. The stream is read with verify's own pieces: the HTTP
transport (:mod:`kimi_serve.core.http`, its deadline and read limits), the openai SDK's SSE grammar
(:class:`~kimi_serve.verify.sse.SseFeed`) and merge (:mod:`kimi_serve.verify.accumulate`); raw Kimi markup in the
answer is recognised by verify's diagnosis (its tool-token and think-marker patterns).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.http import TransportError, request
from kimi_serve.core.output import sgr
from kimi_serve.verify import http_findings as hx
from kimi_serve.verify import wire
from kimi_serve.verify.accumulate import Merge, finish, merge_delta
from kimi_serve.verify.diagnose import TOOL_TOKEN
from kimi_serve.verify.runner import _served_models
from kimi_serve.verify.sse import SseEvent, SseFeed
from kimi_serve.verify.stream import stall_limit
from kimi_serve.verify.target import Target
from kimi_serve.verify.thinking import marker

RAW_MARKUP = (
    "the server is returning raw Kimi markup: start it with --tool-call-parser kimi_k2 --reasoning-parser kimi_k2"
)
_SECTION = re.compile(r"<\|tool_calls_section_(?:begin|end)\|>")
# what a terminal may show of server text: newlines and tabs stay, other control characters (ESC...) are escaped
_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _safe(text: str) -> str:
    return _UNSAFE.sub(lambda m: wire.printable(m.group(0)), text)


@dataclass
class Display:
    """Where a turn is shown: ``out`` the answer and the tool calls, ``err`` the reasoning and the notes."""

    out: TextIO
    err: TextIO
    colour: bool = False
    _in: str = ""  # "reasoning" or "content": the block being written

    def _switch(self, block: str) -> None:
        if self._in == block:
            return
        if self._in == "reasoning":
            self.err.write("\n")
            self.err.flush()
        if block == "reasoning" and not self.colour:
            self.err.write("[reasoning] ")
        self._in = block

    def reasoning(self, text: str) -> None:
        self._switch("reasoning")
        self.err.write(sgr(_safe(text), "2", self.colour))
        self.err.flush()

    def content(self, text: str) -> None:
        self._switch("content")
        self.out.write(_safe(text))
        self.out.flush()

    def end(self) -> None:
        if self._in == "content":
            self.out.write("\n")
            self.out.flush()
        elif self._in == "reasoning":
            self.err.write("\n")
            self.err.flush()
        self._in = ""

    def tool_call(self, name: str, arguments: str) -> None:
        try:
            shown = json.dumps(json.loads(arguments), ensure_ascii=False)
        except ValueError:
            shown = f"{arguments}  (arguments are not JSON)"
        self.out.write(f"tool call: {_safe(name)} {_safe(shown)}\n")
        self.out.flush()

    def note(self, text: str) -> None:
        self.err.write(f"chat: {text}\n")
        self.err.flush()


@dataclass
class ChatTurn:
    """What one turn brought back: the answer's text, its reasoning, its tool calls and whether raw markup was seen."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    raw_markup: bool = False

    def message(self) -> dict[str, Any]:
        """The assistant message to send back as history (reasoning is not sent back)."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = self.tool_calls
        return msg


def _fail(finding: Any, exit_code: ExitCode) -> KimiServeError:
    return KimiServeError(wire.printable(finding.message), hint=finding.fix or None, exit_code=exit_code)


def unreachable(target: Target, err: TransportError) -> KimiServeError:
    """No HTTP answer at ``target`` (exit 3), in chat's words: it has no --wait to offer."""
    return KimiServeError(
        f"{target.base_url}: {err.detail}",
        where="--host",
        hint="start the server (kimi-serve up --profile P), or point --host / --profile at it",
        exit_code=ExitCode.UNREACHABLE,
    )


def served_model(target: Target, api_key: str | None, timeout: float) -> str:
    """The first model ``GET /v1/models`` lists (as verify picks it); exit 3 when the server cannot be reached."""
    try:
        reply = request("GET", target.url("/v1/models"), deadline=time.monotonic() + timeout, api_key=api_key)
    except TransportError as err:
        raise unreachable(target, err) from None
    failure = hx.http_finding(reply, api_key_sent=bool(api_key), model=None)
    data, failure = (None, failure) if failure is not None else hx.parse_json_body(reply)
    if failure is not None:
        raise _fail(failure, ExitCode.FAILED)
    served = _served_models(data)
    if not served:
        raise KimiServeError(
            f"{target.base_url}: GET /v1/models lists no model", hint="pass --model NAME", exit_code=ExitCode.FAILED
        )
    return served[0]


def has_raw_markup(text: str) -> bool:
    """Kimi's tool-call tokens or a think marker of any Kimi family (verify's diagnosis) in ``text``."""
    return bool(TOOL_TOKEN.search(text) or _SECTION.search(text) or marker(text))


class _StreamShown:
    """The stream's events as they arrive: text shown at once, every delta merged as the openai SDK merges it."""

    def __init__(self, display: Display) -> None:
        self.display = display
        self.feed = SseFeed()
        self.message: dict[str, Any] = {}
        self.merge = Merge()
        self.events = 0
        self.error = ""

    def chunk(self, piece: bytes) -> None:
        for event in self.feed.feed(piece):
            self.event(event)

    def event(self, event: SseEvent) -> None:
        if event.fault is not None or event.data.strip().startswith("[DONE]"):
            return
        self.events += 1
        try:
            chunk = wire.loads(event.data)
        except ValueError:
            return
        if isinstance(chunk, dict) and chunk.get("error"):
            err = chunk["error"]
            self.error = str(err.get("message", err) if isinstance(err, dict) else err)[:300]
            return
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        if isinstance(delta.get("reasoning_content"), str) and delta["reasoning_content"]:
            self.display.reasoning(delta["reasoning_content"])
        if isinstance(delta.get("content"), str) and delta["content"]:
            self.display.content(delta["content"])
        merge_delta(self.message, delta, "delta", self.merge)


def chat_turn(
    target: Target,
    messages: list[dict[str, Any]],
    *,
    model: str,
    api_key: str | None,
    timeout: float,
    display: Display,
    max_tokens: int | None = None,
    tools: list[dict[str, Any]] | None = None,
) -> ChatTurn:
    """Send ``messages`` with ``stream: true``, show the answer as it arrives, and return the turn. An answer that is
    not a stream (an HTTP error, a proxy's page) is exit 1, no answer at all exit 3 (a KimiServeError)."""
    body: dict[str, Any] = {"model": model, "messages": messages, "stream": True}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if tools:
        body["tools"] = tools
    reader = _StreamShown(display)
    try:
        reply = request(
            "POST",
            target.url("/v1/chat/completions"),
            deadline=time.monotonic() + timeout,
            api_key=api_key,
            json_body=body,
            stall_s=stall_limit(timeout),
            on_chunk=reader.chunk,
        )
    except TransportError as err:
        raise unreachable(target, err) from None
    failure = hx.http_finding(reply, api_key_sent=bool(api_key), model=model)
    if failure is not None:
        display.end()
        raise _fail(failure, ExitCode.FAILED)
    if reader.events == 0 and reply.body:  # a body sent compressed: shown once whole, decoded
        for event in SseFeed().feed(reply.body + b"\n\n"):
            reader.event(event)
    display.end()
    if reader.error:
        raise KimiServeError(
            f"the server sent an error mid-stream: {wire.printable(reader.error)}",
            hint="read the server's log for this request",
            exit_code=ExitCode.FAILED,
        )
    if reply.timed_out or (reader.events == 0 and reply.status == 200):
        raise KimiServeError(
            f"{target.base_url}: no complete answer within {timeout:g}s"
            if reply.timed_out
            else f"{target.base_url}: the answer to stream=true is not a server-sent event stream",
            hint="raise --timeout, or read the server's log"
            if reply.timed_out
            else "point --host at SGLang's OpenAI server",
            exit_code=ExitCode.FAILED,
        )
    message = finish(reader.message)
    turn = ChatTurn(
        content=message.get("content") if isinstance(message.get("content"), str) else "",
        reasoning=message.get("reasoning_content") if isinstance(message.get("reasoning_content"), str) else "",
    )
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            name, arguments = str(fn.get("name") or "?"), str(fn.get("arguments") or "")
            display.tool_call(name, arguments)
            turn.tool_calls.append(
                {"id": call.get("id"), "type": "function", "function": {"name": name, "arguments": arguments}}
            )
    turn.raw_markup = has_raw_markup(turn.content)
    if turn.raw_markup:
        display.note(RAW_MARKUP)
    return turn
