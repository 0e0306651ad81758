"""A corpus of chat-completion wire bodies, correct and broken, shaped like SGLang 0.5.23's, vLLM's and proxies'
output, for holding verify's verdict to the official openai SDK's (tests/test_verify_sdk_agreement.py).

Each case is the same assistant turn (its ``truth``) put on the wire one way. SGLang's shapes follow the reference of
its serving layer: a first chunk ``{"role": "assistant", "content": "", "reasoning_content": null}``, reasoning and
content deltas, per call a head delta with ``id``/``type``/``name`` and ``arguments: ""`` then fragments with
``id: null``, ``type: "function"``, ``name: null``; a final chunk with ``finish_reason`` and ``matched_stop``; a
usage-only chunk (``choices: []``); ``data: [DONE]``.
"""

from __future__ import annotations

import copy
import gzip
import json
from dataclasses import dataclass, field
from typing import Any

TOOL_REASONING = "The user wants the weather in Paris; call get_weather."
TOOL_ARGS = '{"city": "Paris"}'
SOLVE_REASONING = "17 * 23 = 340 + 51 = 391."


@dataclass(frozen=True)
class Truth:
    """The turn a client should read back."""

    content: str
    reasoning: str
    calls: tuple[tuple[str, str, dict[str, Any]], ...]  # (id, name, arguments)
    finish: str

    @property
    def probe(self) -> str:
        return "tool" if self.calls else "reasoning"


TOOL_TURN = Truth("", TOOL_REASONING, (("functions.get_weather:0", "get_weather", {"city": "Paris"}),), "tool_calls")
SOLVE_TURN = Truth("391", SOLVE_REASONING, (), "stop")
LINE_SEP_TURN = Truth("3\u20289\u20291", SOLVE_REASONING, (), "stop")  # U+2028/2029 are no SSE line ends


@dataclass(frozen=True)
class Case:
    name: str
    body: bytes
    stream: bool
    truth: Truth
    sdk_reads_it: bool  # pinned: what the official SDK does with these bytes (the test checks it still does)
    code: str | None = None  # the finding verify must lead with when the SDK cannot read it
    notes: tuple[str, ...] = field(default_factory=tuple)
    encoding: str | None = None  # the Content-Encoding header sent with ``body`` (``body`` is the bytes on the wire)


def _chunk(
    delta: dict[str, Any] | None,
    finish: str | None = None,
    *,
    index: Any = 0,
    obj: str | None = "chat.completion.chunk",
    drop_index: bool = False,
) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
    if drop_index:
        del choice["index"]
    if finish:
        choice["matched_stop"] = 163586
    chunk: dict[str, Any] = {"id": "b5c1e4", "created": 1767225600, "model": "kimi-k2.5", "choices": [choice]}
    if obj is not None:
        chunk["object"] = obj
    return chunk


def _usage_chunk() -> dict[str, Any]:
    return {
        "id": "b5c1e4",
        "object": "chat.completion.chunk",
        "created": 1767225600,
        "model": "kimi-k2.5",
        "choices": [],
        "usage": {"prompt_tokens": 61, "completion_tokens": 24, "total_tokens": 85},
    }


def sse(chunks: list[Any], *, done: bool = True) -> bytes:
    text = "".join(f"data: {c if isinstance(c, str) else json.dumps(c)}\n\n" for c in chunks)
    return (text + ("data: [DONE]\n\n" if done else "")).encode()


def framed(
    chunks: list[Any], *, head: str = "", each: Any = None, after: str = "", eol: str = "\n", ascii_only: bool = True
) -> bytes:
    """An SSE body with fields beyond ``data:`` (the shapes gateways add): ``head`` before the first event, ``each(i)``
    lines inside event i (before its ``data:``), ``after`` after every event, ``eol`` for every line end."""
    parts = [head]
    for i, c in enumerate([*chunks, "[DONE]"]):
        data = c if isinstance(c, str) else json.dumps(c, ensure_ascii=ascii_only)
        parts.append(f"{each(i) if each else ''}data: {data}\n\n{after}")
    return "".join(parts).replace("\n", eol).encode()


def _pieces(text: str, size: int = 9) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def sglang_chunks(truth: Truth, *, reasoning_keys: tuple[str, ...] = ("reasoning_content",)) -> list[dict[str, Any]]:
    """SGLang 0.5.23's stream for ``truth`` (``reasoning_keys``: where each reasoning delta goes)."""
    chunks = [_chunk({"role": "assistant", "content": "", "reasoning_content": None})]
    chunks += [_chunk(dict.fromkeys(reasoning_keys, p)) for p in _pieces(truth.reasoning)]
    chunks += [_chunk({"reasoning_content": None, "content": p}) for p in _pieces(truth.content)]
    for index, (call_id, name, arguments) in enumerate(truth.calls):
        chunks.append(
            _chunk(
                {
                    "tool_calls": [
                        {"id": call_id, "index": index, "type": "function", "function": {"name": name, "arguments": ""}}
                    ]
                }
            )
        )
        chunks += [
            _chunk(
                {
                    "tool_calls": [
                        {"id": None, "index": index, "type": "function", "function": {"name": None, "arguments": p}}
                    ]
                }
            )
            for p in _pieces(json.dumps(arguments))
        ]
    chunks.append(_chunk({"reasoning_content": None}, truth.finish))
    chunks.append(_usage_chunk())
    return chunks


def vllm_tool_chunks(truth: Truth) -> list[dict[str, Any]]:
    """vLLM's shape: the head delta has no ``arguments`` key; later deltas carry only ``index`` and the fragment;
    reasoning in both ``reasoning`` and the older ``reasoning_content``."""
    chunks = [_chunk({"role": "assistant", "content": ""})]
    chunks += [_chunk({"reasoning": p, "reasoning_content": p}) for p in _pieces(truth.reasoning)]
    for index, (call_id, name, arguments) in enumerate(truth.calls):
        chunks.append(
            _chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function", "function": {"name": name}}]})
        )
        chunks += [
            _chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]})
            for p in _pieces(json.dumps(arguments))
        ]
    chunks.append(_chunk({}, truth.finish))
    return chunks


def _tool_deltas(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [tc for c in chunks for ch in c["choices"] for tc in (ch["delta"] or {}).get("tool_calls") or []]


def _edit(chunks: list[dict[str, Any]], fn: Any) -> list[dict[str, Any]]:
    chunks = copy.deepcopy(chunks)
    fn(chunks)
    return chunks


def completion(
    truth: Truth, *, arguments_as_object: bool = False, reasoning_keys: tuple[str, ...] = ("reasoning_content",)
) -> bytes:
    """A non-streamed ``chat.completion`` body (SGLang's shape)."""
    message: dict[str, Any] = {"role": "assistant", "content": truth.content or None, "reasoning_content": None}
    message.update(dict.fromkeys(reasoning_keys, truth.reasoning))
    if truth.calls:
        message["tool_calls"] = [
            {
                "id": cid,
                "index": i,
                "type": "function",
                "function": {"name": name, "arguments": args if arguments_as_object else json.dumps(args)},
            }
            for i, (cid, name, args) in enumerate(truth.calls)
        ]
    body = {
        "id": "b5c1e4",
        "object": "chat.completion",
        "created": 1767225600,
        "model": "kimi-k2.5",
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": truth.finish, "matched_stop": None}
        ],
        "usage": {"prompt_tokens": 61, "completion_tokens": 24, "total_tokens": 85},
    }
    return json.dumps(body).encode()


def _set_all(key: str, value: Any) -> Any:
    def edit(chunks: list[dict[str, Any]]) -> None:
        for tc in _tool_deltas(chunks):
            tc[key] = value

    return edit


def _type_null_in_fragments(chunks: list[dict[str, Any]]) -> None:
    for tc in _tool_deltas(chunks):
        if tc["id"] is None:
            tc["type"] = None


def _repeat_name(chunks: list[dict[str, Any]]) -> None:
    for tc in _tool_deltas(chunks):
        tc["function"]["name"] = "get_weather"


def _role_everywhere(chunks: list[dict[str, Any]]) -> None:
    for c in chunks:
        for ch in c["choices"]:
            if ch["delta"] is not None:
                ch["delta"]["role"] = "assistant"


def _arguments_object(chunks: list[dict[str, Any]]) -> None:
    deltas = _tool_deltas(chunks)
    deltas[0]["function"]["arguments"] = {"city": "Paris"}
    for tc in deltas[1:]:
        tc["function"]["arguments"] = None


def _arguments_object_later(chunks: list[dict[str, Any]]) -> None:
    deltas = _tool_deltas(chunks)
    deltas[1]["function"]["arguments"] = {"city": "Paris"}
    for tc in deltas[2:]:
        tc["function"]["arguments"] = None


def _no_tool_index(chunks: list[dict[str, Any]]) -> None:
    for tc in _tool_deltas(chunks):
        del tc["index"]


def _tool_index_from_one(chunks: list[dict[str, Any]]) -> None:
    for tc in _tool_deltas(chunks):
        tc["index"] += 1


def _whole_arguments_in_head(truth: Truth) -> list[dict[str, Any]]:
    """A buffering proxy: each call in one delta with its complete arguments."""
    chunks = sglang_chunks(truth)
    heads = [c for c in chunks if any((ch["delta"] or {}).get("tool_calls") for ch in c["choices"])]
    for c in heads:
        tc = c["choices"][0]["delta"]["tool_calls"][0]
        if tc["id"] is None:
            chunks.remove(c)
        else:
            tc["function"]["arguments"] = TOOL_ARGS
    return chunks


def _strip(key: str) -> Any:
    def edit(chunks: list[dict[str, Any]]) -> None:
        for c in chunks:
            c.pop(key, None)

    return edit


def _drop_choice_index(chunks: list[dict[str, Any]]) -> None:
    for c in chunks:
        for ch in c["choices"]:
            ch.pop("index", None)


def _cases() -> list[Case]:
    tool, solve = sglang_chunks(TOOL_TURN), sglang_chunks(SOLVE_TURN)
    error = {"error": {"message": "CUDA out of memory", "type": "InternalServerError", "code": 500}}
    return [
        # what clients read whole: verify passes
        Case("sglang-tool", sse(tool), True, TOOL_TURN, True),
        Case("sglang-reasoning", sse(solve), True, SOLVE_TURN, True),
        Case("sglang-tool-json", completion(TOOL_TURN), False, TOOL_TURN, True),
        Case("sglang-reasoning-json", completion(SOLVE_TURN), False, SOLVE_TURN, True),
        Case("vllm-tool-reasoning-in-both-fields", sse(vllm_tool_chunks(TOOL_TURN)), True, TOOL_TURN, True),
        Case(
            "reasoning-in-both-fields",
            sse(sglang_chunks(SOLVE_TURN, reasoning_keys=("reasoning_content", "reasoning"))),
            True,
            SOLVE_TURN,
            True,
        ),
        Case(
            "reasoning-in-both-fields-json",
            completion(SOLVE_TURN, reasoning_keys=("reasoning_content", "reasoning")),
            False,
            SOLVE_TURN,
            True,
        ),
        Case("proxy-whole-arguments-in-one-delta", sse(_whole_arguments_in_head(TOOL_TURN)), True, TOOL_TURN, True),
        Case("no-usage-chunk", sse(tool[:-1]), True, TOOL_TURN, True),
        Case("done-missing-after-finish", sse(tool, done=False), True, TOOL_TURN, True),
        # SSE fields beyond data: that the SDK's reader reads whole (measured; sse.py says why)
        Case("sse-event-ids", framed(tool, each=lambda i: f"id: {i}\n"), True, TOOL_TURN, True),
        Case("sse-keepalive-comments", framed(solve, after=": keep-alive\n\n"), True, SOLVE_TURN, True),
        Case(
            "sse-retry-and-event-names",
            framed(solve, head="retry: 3000\n", each=lambda i: "event: message\n"),
            True,
            SOLVE_TURN,
            True,
        ),
        Case(
            "sse-comment-line-in-events-with-ids",
            framed(tool, each=lambda i: f": ka\nid: {i}\n"),
            True,
            TOOL_TURN,
            True,
        ),
        Case("sse-crlf", framed(tool, eol="\r\n"), True, TOOL_TURN, True),
        Case("gzip-body-with-its-header", gzip.compress(sse(tool), mtime=0), True, TOOL_TURN, True, encoding="gzip"),
        Case(
            "gzip-body-with-its-header-json",
            gzip.compress(completion(SOLVE_TURN), mtime=0),
            False,
            SOLVE_TURN,
            True,
            encoding="gzip",
        ),
        Case("sse-cr", framed(solve, eol="\r"), True, SOLVE_TURN, True),
        Case("sse-u2028-in-content", framed(sglang_chunks(LINE_SEP_TURN), ascii_only=False), True, LINE_SEP_TURN, True),
        # what makes the SDK raise or lose data: verify fails, naming the cause
        Case(
            "sse-ids-with-keepalives",
            framed(tool, each=lambda i: f"id: {i}\n", after=": keep-alive\n\n"),
            True,
            TOOL_TURN,
            False,
            "stream_sse_field",
        ),
        Case(
            "sse-ids-extra-blank-lines",
            framed(solve, each=lambda i: f"id: evt-{i}\n", after="\n"),
            True,
            SOLVE_TURN,
            False,
            "stream_sse_field",
        ),
        Case("sse-retry-alone", framed(solve, head="retry: 3000\n\n"), True, SOLVE_TURN, False, "stream_sse_field"),
        Case("sse-event-ping-alone", framed(tool, after="event: ping\n\n"), True, TOOL_TURN, False, "stream_sse_field"),
        Case("sse-id-alone", framed(solve, head="id: 0\n\n"), True, SOLVE_TURN, False, "stream_sse_field"),
        Case(
            "sse-thread-event-name",
            framed(solve, each=lambda i: "event: thread.message.delta\n"),
            True,
            SOLVE_TURN,
            False,
            "stream_sse_field",
        ),
        Case(
            "arguments-object-stream",
            sse(_edit(tool, _arguments_object)),
            True,
            TOOL_TURN,
            False,
            "arguments_not_string",
        ),
        Case(
            "arguments-object-json",
            completion(TOOL_TURN, arguments_as_object=True),
            False,
            TOOL_TURN,
            False,
            "arguments_not_string",
        ),
        Case(
            "arguments-turn-into-object",
            sse(_edit(tool, _arguments_object_later)),
            True,
            TOOL_TURN,
            False,
            "stream_type_change",
        ),
        Case(
            "proxy-repeats-id",
            sse(_edit(tool, _set_all("id", "functions.get_weather:0"))),
            True,
            TOOL_TURN,
            False,
            "stream_repeated_field",
        ),
        Case("proxy-repeats-name", sse(_edit(tool, _repeat_name)), True, TOOL_TURN, False, "stream_repeated_field"),
        Case(
            "proxy-repeats-role", sse(_edit(solve, _role_everywhere)), True, SOLVE_TURN, False, "stream_repeated_field"
        ),
        Case(
            "type-null-in-fragments",
            sse(_edit(tool, _type_null_in_fragments)),
            True,
            TOOL_TURN,
            False,
            "stream_type_reset",
        ),
        Case("tool-index-missing", sse(_edit(tool, _no_tool_index)), True, TOOL_TURN, False, "stream_tool_index"),
        Case("tool-index-from-1", sse(_edit(tool, _tool_index_from_one)), True, TOOL_TURN, False, "stream_tool_index"),
        Case(
            "choice-index-missing",
            sse(_edit(solve, _drop_choice_index)),
            True,
            SOLVE_TURN,
            False,
            "stream_choice_index",
        ),
        Case(
            "proxy-strips-object", sse(_edit(solve, _strip("object"))), True, SOLVE_TURN, False, "stream_chunk_object"
        ),
        Case(
            "reasoning-only-in-reasoning-field",
            sse(sglang_chunks(SOLVE_TURN, reasoning_keys=("reasoning",))),
            True,
            SOLVE_TURN,
            False,
            "reasoning_field",
        ),
        Case(
            "reasoning-only-in-reasoning-field-json",
            completion(SOLVE_TURN, reasoning_keys=("reasoning",)),
            False,
            SOLVE_TURN,
            False,
            "reasoning_field",
        ),
        Case("truncated-before-finish", sse(tool[:8], done=False), True, TOOL_TURN, False, "stream_no_done"),
        Case("error-mid-stream", sse([*solve[:4], error, *solve[4:]]), True, SOLVE_TURN, False, "stream_error"),
        # a Content-Encoding header on a body that is not so encoded (a proxy decoded it and kept the header)
        Case("gzip-header-plain-body", sse(tool), True, TOOL_TURN, False, "content_encoding", encoding="gzip"),
        Case(
            "gzip-header-plain-body-json",
            completion(TOOL_TURN),
            False,
            TOOL_TURN,
            False,
            "content_encoding",
            encoding="gzip",
        ),
        Case(
            "finish-reason-missing",
            sse([c for c in solve if not c["choices"] or not c["choices"][0]["finish_reason"]]),
            True,
            SOLVE_TURN,
            False,
            "stream_no_finish_reason",
        ),
    ]


CASES = _cases()


def sdk_final_completion(body: bytes, *, stream: bool, encoding: str | None = None) -> Any:
    """The official openai SDK's final completion for ``body``: ``chat.completions.stream`` (its
    ChatCompletionStreamState accumulator) or ``chat.completions.create``, reading the bytes through httpx's in-process
    transport (the SDK's own SSE decoder and models run; no network), with ``Content-Encoding: encoding`` when given.
    Raises what the SDK raises."""
    import openai

    try:  # the HTTP library the installed SDK is built on (openai 3.x: httpx2; older: httpx)
        import httpx2 as httpx
    except ImportError:  # pragma: no cover
        import httpx  # type: ignore[no-redef]

    def answer(request: Any) -> Any:
        headers = {"content-type": "text/event-stream" if stream else "application/json"}
        if encoding:
            headers["content-encoding"] = encoding
        return httpx.Response(200, content=body, headers=headers)

    client = openai.OpenAI(
        api_key="sk-test",
        base_url="http://server/v1",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(answer)),
    )
    messages = [{"role": "user", "content": "What is the weather in Paris right now? Use the get_weather tool."}]
    if not stream:
        return client.chat.completions.create(model="kimi-k2.5", messages=messages)
    with client.chat.completions.stream(model="kimi-k2.5", messages=messages) as events:
        for _event in events:
            pass
        return events.get_final_completion()
