"""`kimi-serve chat`: one turn over the OpenAI chat completions API, streamed and shown as it arrives (docs/verify.md,
"chat"). The answer goes to stdout, the reasoning apart on stderr (dim on a terminal, else each block headed
``[reasoning]``), tool calls as their name and JSON arguments. The stream is read with verify's own pieces: the HTTP
transport (:mod:`kimi_serve.core.http`, its deadline and read limits) and verify's one stream reader
(:class:`~kimi_serve.verify.stream.StreamReader`: the openai SDK's SSE grammar and merge); raw Kimi markup in the
answer is recognised by verify's diagnosis (its tool-token and think-marker patterns).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.http import TransportError, request
from kimi_serve.core.output import sgr
from kimi_serve.verify import http_findings as hx
from kimi_serve.verify import wire
from kimi_serve.verify.diagnose import TOOL_TOKEN
from kimi_serve.verify.discovery import served_models
from kimi_serve.verify.sse import SseFeed
from kimi_serve.verify.stream import StreamReader, stall_limit
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
        self._switch("")

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
    served = served_models(data)
    if not served:
        raise KimiServeError(
            f"{target.base_url}: GET /v1/models lists no model", hint="pass --model NAME", exit_code=ExitCode.FAILED
        )
    return served[0]


def has_raw_markup(text: str) -> bool:
    """Kimi's tool-call tokens or a think marker of any Kimi family (verify's diagnosis) in ``text``."""
    return bool(TOOL_TOKEN.search(text) or _SECTION.search(text) or marker(text))


def _shown(display: Display) -> Callable[[dict[str, Any]], None]:
    """Each delta's text shown as it arrives: the reasoning on ``err``, the answer on ``out``."""

    def show(delta: dict[str, Any]) -> None:
        if isinstance(delta.get("reasoning_content"), str) and delta["reasoning_content"]:
            display.reasoning(delta["reasoning_content"])
        if isinstance(delta.get("content"), str) and delta["content"]:
            display.content(delta["content"])

    return show


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
    reader = StreamReader(on_delta=_shown(display))
    try:
        reply = request(
            "POST",
            target.url("/v1/chat/completions"),
            deadline=time.monotonic() + timeout,
            api_key=api_key,
            json_body=body,
            stall_s=stall_limit(timeout),
            on_chunk=reader.feed,
        )
    except TransportError as err:
        raise unreachable(target, err) from None
    failure = hx.http_finding(reply, api_key_sent=bool(api_key), model=model)
    if failure is not None:
        display.end()
        raise _fail(failure, ExitCode.FAILED)
    if reader.count == 0 and reply.body:  # a body sent compressed: shown once whole, decoded
        reader.read(SseFeed().feed(reply.body + b"\n\n"))
    display.end()
    if reader.error:
        raise KimiServeError(
            f"the server sent an error mid-stream: {wire.printable(reader.error)}",
            hint="read the server's log for this request",
            exit_code=ExitCode.FAILED,
        )
    if reply.timed_out or (reader.count == 0 and reply.status == 200):
        raise KimiServeError(
            f"{target.base_url}: no complete answer within {timeout:g}s"
            if reply.timed_out
            else f"{target.base_url}: the answer to stream=true is not a server-sent event stream",
            hint="raise --timeout, or read the server's log"
            if reply.timed_out
            else "point --host at SGLang's OpenAI server",
            exit_code=ExitCode.FAILED,
        )
    answer = reader.answer()
    turn = ChatTurn(content=answer.content or "", reasoning=answer.reasoning or "")
    for call in answer.tool_calls:
        name, arguments = call.name or "?", call.arguments or ""
        display.tool_call(name, arguments)
        turn.tool_calls.append({"id": call.id, "type": "function", "function": {"name": name, "arguments": arguments}})
    turn.raw_markup = has_raw_markup(turn.content)
    if turn.raw_markup:
        display.note(RAW_MARKUP)
    return turn
