"""STAND-IN for SGLang's OpenAI server, for verify's tests and benchmark: not SGLang, not a model.

A stdlib ThreadingHTTPServer on 127.0.0.1 that answers /health, /v1/models, /model_info and /v1/chat/completions
with SGLang 0.5.23's wire shapes (docs/verify.md), playing either correct behaviour or one failure
class (``mode``). It "answers" each probe prompt with a fixed turn chosen from the request (tools offered, tool
result in history, thinking on/off), then shapes it the way a correctly or wrongly configured server would.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _usage(body: dict[str, Any], content: Any, reasoning: Any) -> dict[str, Any]:
    """SGLang's ``usage`` shape, counted roughly (4 characters a token): what verify's token accounting reads."""
    prompt = len(json.dumps(body.get("messages"))) // 4 + 1
    thought = len(reasoning or "") // 4
    completion = thought + len(content or "") // 4 + 1
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "reasoning_tokens": thought,
        "completion_tokens_details": {"reasoning_tokens": thought},
    }


CORRECT_MODES = (
    "correct",
    "call-ids",
    "content-with-calls",
    "no-tool-reasoning",
    "flaky-model",
    "sse-event-ids",
    "sse-keepalive",
    "sse-named-events",
    "sse-crlf",
    "answer-restates-result",
)
FAILURE_MODES = (
    "no-tool-parser",
    "no-reasoning-parser",
    "no-parsers",
    "think-stripped",
    "reasoning-stripped-no-parser",
    "reasoning-field",
    "tool-in-reasoning",
    "finish-stop-with-calls",
    "tool-calls-empty",
    "bad-json-args",
    "schema-violation",
    "unknown-function",
    "missing-id",
    "special-token-leak",
    "instant-ignored",
    "stream-no-done",
    "stream-no-finish",
    "stream-stall",
    "hang",
    "http-500",
    "non-json",
    "duplicate-ids",
    "large-arg-cut",
    "second-turn-empty",
    "single-call",
    "slow-stream",
    "think-vl-markers",
    "think-k3-markers",
    "reasoning-echo",
    "sse-ids-keepalive",
    "sse-retry-block",
    "sse-ping-events",
    "loop-same-call",
    "empty-after-think",
    "drops-under-load",
    "effort-ignored",
    "reasoning-required",
    "stream-second-call-lost",
)
RESTATED = "17 * 23 = 340 + 51 = 391."  # "answer-restates-result": a summary of the reasoning, not a copy
MARKERS = {  # think markers of other Kimi families, wrapped around the reasoning in content
    "think-vl-markers": ("◁think▷", "◁/think▷"),
    "think-k3-markers": ("<|open|>think<|sep|>", "<|close|>think<|sep|>"),
}
# How each SSE mode frames an event (``data: ...`` lines as SGLang sends them, plus what a gateway adds): a field
# line before the data, and a block after the event. "sse-*" correct modes: what the openai SDK reads whole.
SSE_FRAMING = {
    "sse-event-ids": (lambda n: f"id: {n}\n", ""),
    "sse-keepalive": (lambda n: "", ": keep-alive\n\n"),
    "sse-named-events": (lambda n: ("retry: 3000\n" if n == 0 else "") + "event: message\n", ""),
    "sse-ids-keepalive": (lambda n: f"id: {n}\n", ": keep-alive\n\n"),
    "sse-retry-block": (lambda n: "retry: 3000\n\n" if n == 0 else "", ""),
    "sse-ping-events": (lambda n: "", "event: ping\n\n"),
}
# Hostile servers (verify must end within its deadline and its read limits against them), on /v1/chat/completions:
# "endless-body" a JSON body that never ends; "endless-stream" SSE events without end, as fast as they go;
# "huge-line" one `data:` line that never ends; "trickle-head" the response head a byte every TRICKLE_GAP s (slowloris);
# "trickle-body" a complete head, then the body a byte every TRICKLE_GAP s.
HOSTILE_MODES = ("endless-body", "endless-stream", "huge-line", "trickle-head", "trickle-body")
TRICKLE_GAP = 0.2
SLOW_GAP = 0.25  # "slow-stream": seconds between its chunks (a slow decoder that keeps sending)
SLOW_TICKS = 3  # "slow-stream": SSE comment chunks before each event after the first (bytes, never an event)
SECTION_BEGIN, SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CALL_BEGIN, ARG_BEGIN, CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
_TOKEN_SPLIT = re.compile(r"(<\|[a-z_]+\|>|</?think>)")
_STALL_LIMIT = 120.0
Rewrite = Callable[[str, int, dict[str, str], bytes], tuple[int, dict[str, str], bytes]]


@dataclass
class Turn:
    """What the stand-in "model" says: reasoning (when thinking), content, tool calls (name, arguments JSON)."""

    reasoning: str
    content: str
    calls: list[tuple[str, str]] = field(default_factory=list)


def _model_turn(body: dict[str, Any], mode: str = "correct") -> Turn:
    messages = body.get("messages") or []
    tools = {t["function"]["name"] for t in body.get("tools") or []}
    prompt = " ".join(str(m.get("content")) for m in messages if m.get("role") == "user")
    if messages and messages[-1].get("role") == "tool":
        if mode == "loop-same-call":  # the result did not reach the model: it calls again
            return Turn("I need the weather; call get_weather.", "", [("get_weather", '{"city": "Paris"}')])
        if mode == "empty-after-think":  # MoonshotAI/Kimi-K2#128: the turn ends right after </think>
            return Turn("The tool reports 18 C and sunny.", "")
        return Turn("The tool reports 18 C and sunny.", "It is 18 °C and sunny in Paris.")
    if "write_file" in tools:
        numbers = " ".join(str(i) for i in range(1, 2001))
        return Turn("Write the numbers.", "", [("write_file", json.dumps({"path": "count.txt", "content": numbers}))])
    if "Tokyo" in prompt:
        return Turn(
            "Two cities, two calls.", "", [("get_weather", '{"city": "Paris"}'), ("get_weather", '{"city": "Tokyo"}')]
        )
    if tools:
        return Turn(
            "The user wants the weather in Paris; call get_weather.", "", [("get_weather", '{"city": "Paris"}')]
        )
    if "France" in prompt:
        return Turn("The capital of France is Paris.", "Paris")
    return Turn("17 * 23 = 17 * 20 + 17 * 3 = 340 + 51 = 391.", "391")


def _section(calls: list[tuple[str, str]]) -> str:
    inner = "".join(f"{CALL_BEGIN}functions.{n}:{i}{ARG_BEGIN}{a}{CALL_END}" for i, (n, a) in enumerate(calls))
    return f"{SECTION_BEGIN}{inner}{SECTION_END}"


@dataclass
class Shaped:
    content: str
    reasoning: str | None
    calls: list[dict[str, Any]]
    finish: str
    reasoning_key: str = "reasoning_content"


def shape(turn: Turn, mode: str, thinking: bool, strict: bool = False) -> Shaped:
    """What a server in ``mode`` returns for ``turn`` (the parsing SGLang would or would not do)."""
    reasoning: str | None = turn.reasoning if thinking or mode == "instant-ignored" else None
    content, calls = turn.content, list(turn.calls)
    if strict and calls and mode in ("no-reasoning-parser", "reasoning-stripped-no-parser"):
        # SGLang's strict-tool grammar from the first token, no reasoning parser to hold it back: no call at all
        return Shaped(turn.reasoning if thinking else turn.content, None, [], "stop")
    if mode == "no-tool-reasoning" and calls:
        reasoning = None
    if mode == "content-with-calls" and calls:
        content = "Let me check that for you."
    if mode == "single-call":
        calls = calls[:1]
    if mode in ("no-tool-parser", "no-parsers", "tool-in-reasoning") and calls:
        if mode == "tool-in-reasoning":
            reasoning = (reasoning or "") + _section(calls)
        else:
            content += _section(calls)
        calls = []
        finish = "stop"
    else:
        finish = "tool_calls" if calls else "stop"
    if mode in ("no-reasoning-parser", "no-parsers") and reasoning is not None:
        content, reasoning = f"{reasoning}</think>{content}", None
    if mode == "reasoning-stripped-no-parser" and reasoning is not None:
        content, reasoning = reasoning + content, None
    if mode == "think-stripped" and reasoning is not None and not calls:
        content, reasoning = "", reasoning + content
    if mode == "special-token-leak":
        content += "<|im_end|>"
    if mode in ("think-vl-markers", "think-k3-markers") and reasoning is not None:
        start, end = MARKERS[mode]
        content, reasoning = f"{start}{reasoning}{end}{content}", None
    if mode == "reasoning-echo" and reasoning:
        content = f"{reasoning}\n\n{content}"
    if mode == "answer-restates-result" and reasoning and not calls:
        content = RESTATED
    if mode == "second-turn-empty" and not turn.calls:
        content, reasoning = "", None
    if mode == "tool-calls-empty" and calls:
        calls = []
    if mode == "finish-stop-with-calls" and calls:
        finish = "stop"
    wire_calls = []
    for i, (name, args) in enumerate(calls):
        call_id = f"call_{i:024x}" if mode == "call-ids" else f"functions.{name}:{i}"
        if mode == "duplicate-ids":
            call_id = f"functions.{name}:0"
        if mode == "unknown-function":
            name = "weather_lookup"
        if mode == "bad-json-args":
            args = args[:-1]
        if mode == "schema-violation":
            args = args.replace('"city"', '"town"')
        call: dict[str, Any] = {
            "id": call_id,
            "index": i,
            "type": "function",
            "function": {"name": name, "arguments": args},
        }
        if mode == "missing-id":
            del call["id"]
        wire_calls.append(call)
    return Shaped(
        content, reasoning, wire_calls, finish, "reasoning" if mode == "reasoning-field" else "reasoning_content"
    )


def raw_completion(prompt: str, mode: str) -> dict[str, Any]:
    """The /generate answer (SGLang's native shape) for a rendered Kimi prompt: the model's raw text, nothing parsed,
    whatever ``mode`` the chat side plays (the raw path needs no parser). One fake id per character; special tokens
    take their Kimi ids."""
    thinking = not prompt.endswith("<think></think>")
    tools = [{"function": {"name": n}} for n in ("get_weather", "write_file") if f'"name":"{n}"' in prompt]
    role = "tool" if "## Return of " in prompt else "user"
    turn = _model_turn({"messages": [{"role": role, "content": prompt}], "tools": tools})
    reasoning = turn.reasoning if thinking and not (mode == "no-tool-reasoning" and turn.calls) else None
    content = "Let me check that for you." if mode == "content-with-calls" and turn.calls else turn.content
    if mode == "answer-restates-result" and reasoning and not turn.calls:
        content = RESTATED
    text = (
        (f"{reasoning}</think>" if reasoning is not None else "")
        + content
        + (_section(turn.calls) if turn.calls else "")
    )
    ids = [
        _KIMI_IDS[p] if p in _KIMI_IDS else ord(c)
        for p in _TOKEN_SPLIT.split(text)
        if p
        for c in ([p] if p in _KIMI_IDS else p)
    ] + [163586]
    return {
        "text": text,
        "output_ids": ids,
        "meta_info": {
            "id": "stand-in",
            "finish_reason": {"type": "stop", "matched": 163586},
            "prompt_tokens": max(1, len(prompt) // 4),
            "completion_tokens": len(ids),
            "cached_tokens": 0,
        },
    }


_KIMI_IDS = {
    "</think>": 163607,
    SECTION_BEGIN: 163595,
    SECTION_END: 163596,
    CALL_BEGIN: 163597,
    ARG_BEGIN: 163598,
    CALL_END: 163599,
}


def _pieces(text: str, size: int = 24) -> list[str]:
    """Token-aligned pieces: special tokens whole (as real SGLang delivers them), text in ``size``-char slices."""
    out: list[str] = []
    for part in _TOKEN_SPLIT.split(text):
        if _TOKEN_SPLIT.fullmatch(part):
            out.append(part)
        else:
            out.extend(part[i : i + size] for i in range(0, len(part), size))
    return [p for p in out if p]


def _sse_events(s: Shaped, mode: str, model: str) -> list[str]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        if finish:
            choice["matched_stop"] = 163586
        return json.dumps(
            {"id": "stand-in", "object": "chat.completion.chunk", "created": 0, "model": model, "choices": [choice]}
        )

    events = [chunk({"role": "assistant", "content": "", "reasoning_content": None})]
    events += [chunk({s.reasoning_key: p}) for p in _pieces(s.reasoning or "")]
    events += [chunk({"reasoning_content": None, "content": p}) for p in _pieces(s.content)]
    calls = s.calls[:1] if mode == "stream-second-call-lost" else s.calls  # non-stream answers keep both
    for call in calls:
        empty = mode == "empty-call-deltas"  # vllm-project/vllm#54701: deltas without a name or arguments
        head = {
            "index": call["index"],
            "type": "function",
            "function": {"name": None if empty else call["function"]["name"], "arguments": ""},
        }
        if "id" in call:
            head["id"] = call["id"]
        events.append(chunk({"tool_calls": [head]}))
        frags = [] if empty else _pieces(call["function"]["arguments"], 64)
        if mode == "large-arg-cut" and len(frags) > 10:
            del frags[len(frags) // 2]
        events += [
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": call["index"],
                            "id": None,
                            "type": "function",
                            "function": {"name": None, "arguments": f},
                        }
                    ]
                }
            )
            for f in frags
        ]
    if mode != "stream-no-finish":
        events.append(chunk({"reasoning_content": None}, s.finish))
    if mode != "stream-no-done":
        events.append("[DONE]")
    return events


class BackloggedServer(ThreadingHTTPServer):
    """A listen backlog like a real server's (uvicorn's is 2048): verify sends every probe at once (20+ connections),
    and the standard library's 5 overflowed on a loaded machine, where the kernel's SYN cookies then answered one
    of them with a reset ("Connection reset by peer", seen once in a full run)."""

    request_queue_size = 128


class ContractServer:
    """The stand-in server. ``with ContractServer("no-tool-parser") as srv: run_verify(srv.host)``.

    ``warm_for``: seconds /health answers 503 after start; ``health_hang``: /health never answers;
    ``api_key``: require ``Authorization: Bearer KEY`` on /v1/* and /model_info (as SGLang does);
    ``delay``: seconds added before every chat completion answer; ``port``: 0 picks a free one;
    ``server_info``: the body of /server_info and /get_server_info (default: 404);
    ``rewrite``: every answer passes through it, ``(path, status, headers, body) -> (status, headers, body)``, a
    stream as one body (the fuzz tests replay mutated answers with it);
    ``context_length``: the served context (/v1/models max_model_len; a larger max_completion_tokens is a 400, as
    SGLang answers it); ``reset``: ``(path, request body) -> bool``, True: the connection of that POST is reset
    (RST) instead of answered, as a server or gateway whose accept backlog overflowed does; ``parser_endpoint``:
    answer ``POST /parse_function_call`` as SGLang 0.5.23's unpatched kimi_k2 detector does verify's cases (no call).
    """

    def __init__(
        self,
        mode: str = "correct",
        *,
        api_key: str | None = None,
        served_model: str = "kimi-k2.5",
        delay: float = 0.0,
        warm_for: float = 0.0,
        health_hang: bool = False,
        port: int = 0,
        server_info: dict[str, Any] | None = None,
        rewrite: Rewrite | None = None,
        context_length: int = 262144,
        reset: Callable[[str, bytes], bool] | None = None,
        parser_endpoint: bool = False,
    ) -> None:
        if mode not in CORRECT_MODES + FAILURE_MODES + HOSTILE_MODES:
            raise ValueError(f"unknown mode {mode!r}")
        self.mode, self.api_key, self.served_model, self.delay = mode, api_key, served_model, delay
        self.warm_for, self.health_hang = warm_for, health_hang
        self.server_info = server_info  # the /server_info body (None: 404, as before SGLang had one)
        self.rewrite = rewrite
        self.context_length = context_length
        self.reset = reset
        # POST /parse_function_call as SGLang 0.5.23's unpatched kimi_k2 detector answers verify's two cases: no call
        self.parser_endpoint = parser_endpoint
        self.in_flight = 0  # chat requests being answered now ("drops-under-load")
        self.waiting = 0  # requests of any path read and not yet answered
        self.peak_in_flight = 0  # the most of them at once (how many requests a client keeps open together)
        self._waiting = threading.Lock()
        self._count = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self._seen: set[str] = set()  # "flaky-model": requests answered once already
        self._stop = threading.Event()
        self._port = port
        self._httpd: ThreadingHTTPServer | None = None
        self._started = 0.0

    @property
    def port(self) -> int:
        assert self._httpd is not None
        return self._httpd.server_address[1]

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> ContractServer:
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = BackloggedServer(("127.0.0.1", self._port), Handler)
        self._httpd.daemon_threads = True
        self._started = time.monotonic()
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self) -> ContractServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def parsers(self) -> dict[str, str | None]:
        tool = None if self.mode in ("no-tool-parser", "no-parsers") else "kimi_k2"
        reasoning = (
            None if self.mode in ("no-reasoning-parser", "no-parsers", "reasoning-stripped-no-parser") else "kimi_k2"
        )
        return {"tool_call_parser": tool, "reasoning_parser": reasoning}


class _Handler(BaseHTTPRequestHandler):
    owner: ContractServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # keep test output clean
        pass

    def handle_one_request(self) -> None:
        self._counted = False
        try:
            super().handle_one_request()
        finally:
            self._answering()

    def parse_request(self) -> bool:
        own = self.owner
        with own._waiting:
            own.waiting += 1
            own.peak_in_flight = max(own.peak_in_flight, own.waiting)
        self._counted = True
        return super().parse_request()

    def _answering(self) -> None:
        """The answer starts: the request no longer waits (counted before its bytes leave, so a client that reads
        the answer and sends its next request is never seen twice)."""
        if getattr(self, "_counted", False):
            self._counted = False
            with self.owner._waiting:
                self.owner.waiting -= 1

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self._answering()
        headers = {"Content-Type": ctype}
        if self.owner.rewrite is not None:
            status, headers, body = self.owner.rewrite(self.path, status, headers, body)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        with contextlib.suppress(OSError):  # verify stopped reading (a read limit): not the stand-in's fault
            self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode())

    def _authorized(self) -> bool:
        key = self.owner.api_key
        if key is None or self.headers.get("Authorization") == f"Bearer {key}":
            return True
        self._json(401, {"error": {"message": "Unauthorized", "type": "Unauthorized"}})
        return False

    def _hang(self) -> None:
        self.owner._stop.wait(_STALL_LIMIT)
        self.close_connection = True

    def do_GET(self) -> None:
        own = self.owner
        if self.path == "/health":
            if own.health_hang:
                return self._hang()
            warming = time.monotonic() - own._started < own.warm_for
            return self._send(503 if warming else 200, b"")
        if not self._authorized():
            return None
        if self.path == "/v1/models":
            return self._json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": own.served_model,
                            "object": "model",
                            "owned_by": "sglang",
                            "root": own.served_model,
                            "max_model_len": own.context_length,
                        }
                    ],
                },
            )
        if self.path == "/model_info":
            return self._json(200, {"model_path": "/models/Kimi-K2.5", **own.parsers()})
        if own.mode == "hang" and self.path in ("/server_info", "/get_server_info"):
            return self._hang()  # a wedged scheduler: SGLang asks it for /server_info, /v1/models it answers itself
        if self.path in ("/server_info", "/get_server_info") and own.server_info is not None:
            return self._json(200, own.server_info)
        return self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        own = self.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if own.reset is not None and own.reset(self.path, raw):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()  # linger 0: an RST, not a FIN
            self.close_connection = True
            return None
        body = json.loads(raw or b"{}")
        if self.path == "/generate" and own.mode not in ("hang", "http-500", "non-json"):
            return self._json(200, raw_completion(body.get("text") or "", own.mode)) if self._authorized() else None
        if self.path == "/parse_function_call" and own.parser_endpoint:
            return self._json(200, {"normal_text": body.get("text") or "", "calls": []})
        if self.path != "/v1/chat/completions":
            return self._json(404, {"detail": "Not Found"})
        own.requests.append(body)
        if not self._authorized():
            return None
        if body.get("model") != own.served_model:
            return self._json(
                404,
                {
                    "object": "error",
                    "message": f"The model `{body.get('model')}` does not exist.",
                    "type": "NotFoundError",
                    "code": 404,
                },
            )
        if own.mode == "hang":
            return self._hang()
        if own.mode in HOSTILE_MODES:
            return self._hostile(own.mode)
        own._stop.wait(own.delay)
        if own.mode == "http-500":
            return self._json(500, {"object": "error", "message": "Internal server error: CUDA error", "code": 500})
        if own.mode == "non-json":
            return self._send(200, b"<html><body>502 Bad Gateway</body></html>", "text/html")
        bare = [
            i
            for i, m in enumerate(body.get("messages") or [])
            if m.get("role") == "assistant" and m.get("tool_calls") and not m.get("reasoning_content")
        ]
        if own.mode == "reasoning-required" and bare:  # Moonshot's API (agentscope-ai/QwenPaw#433)
            message = (
                "thinking is enabled but reasoning_content is missing in assistant tool call message at index "
                f"{bare[0]}"
            )
            return self._json(400, {"error": {"message": message, "type": "invalid_request_error"}})
        wanted = body.get("max_completion_tokens") or body.get("max_tokens") or 0
        if wanted > own.context_length:  # SGLang's serving_chat check, word for word
            return self._json(
                400,
                {
                    "object": "error",
                    "message": f"max_completion_tokens is too large: {wanted}.This model supports at most "
                    f"{own.context_length} completion tokens.",
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                },
            )
        # thinking off as SGLang 0.5.23 reads it: chat_template_kwargs, reasoning_effort "none"; not Moonshot's
        effort_off = body.get("reasoning_effort") == "none" and own.mode != "effort-ignored"
        thinking = (body.get("chat_template_kwargs") or {}).get("thinking") is not False and not effort_off
        strict = any((t.get("function") or {}).get("strict") for t in body.get("tools") or [])
        turn = _model_turn(body, own.mode)
        key = json.dumps(body, sort_keys=True)
        off_day = body.get("temperature", 1.0) > 0  # greedy (the lossless check) is repeatable
        if own.mode == "flaky-model" and turn.calls and off_day and key not in own._seen:  # a sampling model's off day
            own._seen.add(key)
            turn = Turn(turn.reasoning, "I would look that up with the weather service.")
        shaped = shape(turn, own.mode, thinking, strict)
        if body.get("stream"):
            with own._count:
                own.in_flight += 1
                crowded = own.in_flight > 4  # "drops-under-load": a stream that arrives with 4 others in flight
            try:
                own._stop.wait(0.3 if own.mode == "drops-under-load" else 0)  # hold it: the others arrive meanwhile
                loaded = own.mode == "drops-under-load" and crowded
                return self._stream(_sse_events(shaped, "empty-call-deltas" if loaded else own.mode, body["model"]))
            finally:
                with own._count:
                    own.in_flight -= 1
        message: dict[str, Any] = {
            "role": "assistant",
            "content": shaped.content,
            shaped.reasoning_key: shaped.reasoning,
        }
        if shaped.calls:
            message["tool_calls"] = shaped.calls
        self._json(
            200,
            {
                "id": "stand-in",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "logprobs": None,
                        "finish_reason": shaped.finish,
                        "matched_stop": None if shaped.finish == "tool_calls" else 163586,
                    }
                ],
                "usage": _usage(body, shaped.content, shaped.reasoning),
            },
        )

    def _stream(self, events: list[str]) -> None:
        self._answering()
        if self.owner.rewrite is not None:
            return self._send(200, "".join(f"data: {e}\n\n" for e in events).encode(), "text/event-stream")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        for n, event in enumerate(events):
            if self.owner.mode == "stream-stall" and n == 3:
                return self._hang()
            for _ in range(SLOW_TICKS if self.owner.mode == "slow-stream" and n else 0):
                time.sleep(SLOW_GAP)
                try:
                    self.wfile.write(b"8\r\n: slow\n\n\r\n")  # one chunk: its 8 bytes in hex
                    self.wfile.flush()
                except OSError:
                    return None
            field_lines, after = SSE_FRAMING.get(self.owner.mode, (lambda n: "", ""))
            data = f"{field_lines(n)}data: {event}\n\n{after}".encode()
            if self.owner.mode == "sse-crlf":
                data = data.replace(b"\n", b"\r\n")
            try:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
            except OSError:
                return None
        self.wfile.write(b"0\r\n\r\n")

    def _hostile(self, mode: str) -> None:
        """Play one of HOSTILE_MODES until the client goes away (or the server stops)."""
        self.close_connection = True
        head = b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nConnection: close\r\n\r\n" % (
            b"application/json" if mode in ("endless-body", "trickle-body") else b"text/event-stream"
        )
        event = b'data: {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "x"}}]}\n\n'
        block = {
            "endless-body": b'{"choices": [' + b'{"index": 0}, ' * 4096,
            "endless-stream": event * 512,
            "huge-line": b"x" * 65536,
        }
        try:
            if mode == "trickle-head":
                trickle = b"HTTP/1.1 200 OK\r\nX-Trickle: "  # a byte at a time; never the end of the head
                n = 0
                while not self.owner._stop.wait(TRICKLE_GAP):
                    self.wfile.write(trickle[n : n + 1] or b"a")
                    self.wfile.flush()
                    n += 1
                return
            self.wfile.write(head)
            if mode == "trickle-body":
                while not self.owner._stop.wait(TRICKLE_GAP):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                return
            if mode == "huge-line":
                self.wfile.write(b"data: ")
            while not self.owner._stop.is_set():
                self.wfile.write(block[mode])
        except OSError:
            return
