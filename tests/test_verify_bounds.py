"""What a server sends never ends verify in exit 70 (a kimi-serve bug: the start gate and `restart` then get no
verdict): nesting, counts, tool-call indices, terminal control text in a model id, a body that does not match its
Content-Encoding, an option that is no deadline, a key file that is a FIFO. Each is a verify finding (exit 1) or a
one-line error (exit 2). The stand-in is tests/contract_server.py (not SGLang) with one answer rewritten."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from contract_server import ContractServer

from kimi_serve.core.http import Limits, read_limits, request
from kimi_serve.core.keyfile import key_file_problem
from kimi_serve.verify.answer import answer_from_json
from kimi_serve.verify.stream import answer_from_sse

Cli = Callable[..., Any]
DEEP = "[" * 50_000 + "]" * 50_000
HEAD = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "kimi-k2.5"}


def _sse(*deltas: dict[str, Any], finish: str = "stop") -> bytes:
    chunks = [{**HEAD, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    chunks.append({**HEAD, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def _on(path: str, change: Callable[[bytes, dict[str, str]], bytes]) -> Any:
    """A rewrite (ContractServer's hook) that changes the answers to ``path`` only."""

    def rewrite(at: str, status: int, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        return (status, headers, change(body, headers)) if at == path else (status, headers, body)

    return rewrite


def _verify_json(cli: Cli, srv: ContractServer, *extra: str) -> tuple[int, dict[str, Any]]:
    result = cli("verify", "--host", srv.host, "--timeout", "20", "--json", *extra)
    assert result.code != 70, result.err
    return result.code, json.loads(result.out)


def _codes(doc: dict[str, Any]) -> set[str]:
    return {f["code"] for f in doc["findings"]}


def test_deep_nesting_in_an_answer_is_a_finding(loopback_port: Callable[[], int], cli: Cli) -> None:
    def deepen(body: bytes, headers: dict[str, str]) -> bytes:
        return body if b"data:" in body else body[:-1] + b', "extra": ' + DEEP.encode() + b"}"

    with ContractServer(port=loopback_port(), rewrite=_on("/v1/chat/completions", deepen)) as srv:
        code, doc = _verify_json(cli, srv)
    assert code == 1
    assert any("64 levels of nested JSON" in f["message"] for f in doc["findings"]), doc["findings"]


def test_deep_nesting_in_the_model_list_is_a_finding(loopback_port: Callable[[], int], cli: Cli) -> None:
    models = _on("/v1/models", lambda body, headers: b'{"object": "list", "data": ' + DEEP.encode() + b"}")
    with ContractServer(port=loopback_port(), rewrite=models) as srv:
        code, doc = _verify_json(cli, srv)
    assert code == 1 and doc["error"]["code"] == "too_large"
    assert "GET /v1/models" in doc["error"]["message"] and "nested" in doc["error"]["message"]


def test_deep_nesting_in_tool_arguments_is_a_finding() -> None:
    body = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": "functions.get_weather:0", "index": 0, "type": "function", "function": {}}],
                },
            }
        ]
    }
    body["choices"][0]["message"]["tool_calls"][0]["function"] = {"name": "get_weather", "arguments": DEEP}
    from kimi_serve.verify.probes import TOOL

    findings = TOOL.check(answer_from_json(body), {})
    assert [f.code for f in findings] == ["too_large"]
    assert findings[0].message.startswith("tool call #0 (get_weather) arguments is JSON past verify's bound (64 levels")


@pytest.mark.parametrize("index", [-1, -5])
def test_a_bad_streamed_tool_call_index_is_a_contract_failure(index: Any) -> None:
    call = {"index": index, "id": "functions.get_weather:0", "type": "function", "function": {"name": "get_weather"}}
    answer = answer_from_sse(_sse({"role": "assistant", "content": ""}, {"tool_calls": [call]}, finish="tool_calls"))
    assert "stream_tool_index" in {p.code for p in answer.problems}, answer.problems


def test_too_many_tool_calls_are_cut_with_a_finding() -> None:
    calls = [
        {"index": i, "id": f"functions.get_weather:{i}", "type": "function", "function": {"name": "get_weather"}}
        for i in range(300)
    ]
    streamed = answer_from_sse(_sse({"role": "assistant"}, *({"tool_calls": [c]} for c in calls), finish="tool_calls"))
    assert "too_many_tool_calls" in {p.code for p in streamed.problems}
    assert len(streamed.tool_calls) == 128
    plain = answer_from_json({"choices": [{"message": {"role": "assistant", "tool_calls": calls}}]})
    assert [p.code for p in plain.problems] == ["too_many_tool_calls"] and len(plain.tool_calls) == 128


def test_many_small_deltas_merge_in_linear_time() -> None:
    """40,000 deltas of 200 characters: string += copied the whole text each time (~160 GB moved); pieces joined
    once take well under a second."""
    piece = "x" * 200
    body = _sse({"role": "assistant", "content": ""}, *({"content": piece} for _ in range(40_000)))
    started = time.monotonic()
    answer = answer_from_sse(body)
    assert time.monotonic() - started < 8.0
    assert answer.content == piece * 40_000 and not answer.problems


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 200_000,  # no line end: a line-matching regular expression retried from every byte (minutes)
        b"data: " + b"[" * 200_000,
        b"\r" * 200_000 + b"[" * 200_000,
        "é".encode() * 100_000,
    ],
    ids=["brackets", "data-brackets", "carriage-returns", "no-line-end-utf8"],
)
def test_a_stream_without_line_ends_is_read_in_linear_time(body: bytes) -> None:
    started = time.monotonic()
    answer = answer_from_sse(body)
    assert time.monotonic() - started < 5.0
    assert answer.problems and answer.content is None


@pytest.mark.parametrize(
    "document",
    [
        b'"' + b'\\"' * 200_000,  # escaped quotes, no closing quote: requiring it retried the scan from each quote
        b'["' + b"\\\\" * 200_000,
        b"[" * 65 + b"]" * 8_000_000,  # the nesting walk stops at the first close without an open
        b'["[", ' * 100_000 + b"0" + b"]" * 100_000,
    ],
    ids=["escaped-quotes", "escaped-backslashes", "closes", "brackets-in-strings"],
)
def test_the_json_pre_scan_is_linear(document: bytes) -> None:
    from kimi_serve.verify import wire

    started = time.monotonic()
    with pytest.raises(ValueError):
        wire.loads(document)
    assert time.monotonic() - started < 5.0


def test_a_document_of_many_small_values_is_refused_before_it_is_decoded() -> None:
    """4 MiB of ``"ab",`` decoded whole is ~200 MB of Python strings: past MAX_VALUES it is never decoded."""
    from kimi_serve.verify import wire

    with pytest.raises(wire.WireLimit, match="JSON values in one document"):
        wire.loads(b"[" + b'"ab",' * 800_000 + b"0]")
    assert wire.loads(b"[" + b'"ab",' * 1_000 + b"0]")[-1] == 0


def test_the_json_pre_scan_agrees_with_the_decoder() -> None:
    """Brackets and commas inside strings (escaped quotes and backslashes among them) are not structure: random
    documents decode exactly as json.loads decodes them, and their nesting is measured right."""
    import random

    from kimi_serve.verify import wire

    rnd = random.Random(44)

    def text() -> str:
        return "".join(rnd.choice('ab[]{},:"\\\n') for _ in range(rnd.randint(0, 6)))

    def value(depth: int) -> Any:
        roll = rnd.random()
        if depth > 5 or roll < 0.3:
            return rnd.choice([text(), 1, None, True])
        if roll < 0.65:
            return [value(depth + 1) for _ in range(rnd.randint(0, 4))]
        return {text(): value(depth + 1) for _ in range(rnd.randint(0, 4))}

    for _ in range(2000):
        raw = json.dumps(value(0), ensure_ascii=rnd.random() < 0.5).encode()
        assert wire.loads(raw) == json.loads(raw), raw
    nested = json.dumps({"a": ["[[[{", {"b": "]]]"}]}).encode()
    assert wire.loads(b"[" * 61 + nested + b"]" * 61) is not None  # 64 levels: within the bound
    with pytest.raises(wire.WireLimit, match="64 levels"):
        wire.loads(b"[" * 62 + nested + b"]" * 62)


def test_reading_a_stream_stops_at_the_deadline() -> None:
    body = _sse({"role": "assistant", "content": ""}, *({"content": "x"} for _ in range(5000)))
    answer = answer_from_sse(body, deadline=time.monotonic() - 1)
    assert [p.code for p in answer.problems] == ["timeout"]
    assert "--timeout ran out while it read the stream's events (after 511)" in answer.problems[0].message


def test_comment_lines_count_toward_the_stream_limit(loopback_port: Callable[[], int]) -> None:
    flood = _on("/v1/chat/completions", lambda body, headers: b":\n" * 200_000 + body)
    with ContractServer(port=loopback_port(), rewrite=flood) as srv, read_limits(Limits(sse_lines=10_000)):
        body = {"model": srv.served_model, "messages": [{"role": "user", "content": "hi"}], "stream": True}
        url = f"http://{srv.host}/v1/chat/completions"
        reply = request("POST", url, deadline=time.monotonic() + 10, json_body=body)
    assert reply.limit == "10000 lines per stream"
    assert len(reply.body) <= 2 * 10_000 + 64 * 1024


def test_model_id_escapes_and_forgeries_are_shown_escaped(loopback_port: Callable[[], int], cli: Cli) -> None:
    forged = "kimi\x1b[2K\rverify: contract holds (9/9 probes passed in 0.1s)\nverify: contract holds \ud800"
    with ContractServer(port=loopback_port(), served_model=forged) as srv:
        result = cli("verify", "--host", srv.host, "--timeout", "20")
        as_json = cli("verify", "--host", srv.host, "--timeout", "20", "--json")
    assert result.code != 70 and as_json.code != 70, result.err + as_json.err
    text = result.out + result.err
    assert "\x1b" not in text and "\r" not in text
    assert [line for line in result.out.splitlines() if line.startswith("verify: contract")] == [
        result.out.splitlines()[-1]
    ]
    assert "kimi\\x1b[2K\\rverify: contract holds" in result.out and "\\ud800" in result.out
    doc = json.loads(as_json.out)
    as_json.out.encode("utf-8")  # valid UTF-8: no lone surrogate left in the document
    assert doc["model"].startswith("kimi\x1b[2K\r") and doc["model"].endswith("\\ud800")


def test_a_gzip_header_on_a_plain_body_fails_as_the_sdk_does(loopback_port: Callable[[], int], cli: Cli) -> None:
    def header_only(body: bytes, headers: dict[str, str]) -> bytes:
        headers["Content-Encoding"] = "gzip"
        return body

    with ContractServer(port=loopback_port(), rewrite=_on("/v1/chat/completions", header_only)) as srv:
        code, doc = _verify_json(cli, srv)
    assert code == 1 and _codes(doc) == {"content_encoding"}
    message = next(f for f in doc["findings"] if f["code"] == "content_encoding")
    assert "Content-Encoding: gzip on a body that is not gzip data" in message["message"]
    assert "proxy" in message["fix"]


def test_a_gzip_body_with_its_header_is_read(loopback_port: Callable[[], int], cli: Cli) -> None:
    def compress(body: bytes, headers: dict[str, str]) -> bytes:
        headers["Content-Encoding"] = "gzip"
        return gzip.compress(body)

    with ContractServer(port=loopback_port(), rewrite=_on("/v1/chat/completions", compress)) as srv:
        code, doc = _verify_json(cli, srv)
    assert code == 0, doc["findings"]


@pytest.mark.parametrize("value", ["inf", "1e300"])
def test_a_timeout_that_is_no_deadline_is_refused(value: str, loopback_port: Callable[[], int], cli: Cli) -> None:
    with ContractServer(port=loopback_port()) as srv:
        result = cli("verify", "--host", srv.host, f"--timeout={value}")
    assert result.code == 2, (result.out, result.err)
    assert len(result.err.strip().splitlines()) == 1 and "--timeout" in result.err and "Traceback" not in result.err


def _unblock(fifo: Path) -> None:
    """Open the FIFO's write end once (a reader stuck in open() then goes on), so a failing test does not hang."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def _within(seconds: float, fifo: Path, fn: Callable[[], Any]) -> Any:
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        _unblock(fifo)
        worker.join(5)
        pytest.fail(f"still blocked after {seconds}s on the FIFO {fifo}")
    return out[0]


def test_a_fifo_key_file_is_refused_not_waited_on(tmp_path: Path, cli: Cli) -> None:
    fifo = tmp_path / "key.yaml"
    os.mkfifo(fifo, 0o600)
    result = _within(10, fifo, lambda: cli("verify", "--host", "127.0.0.1:9", "--api-key-file", str(fifo)))
    assert result.code == 2, result.err
    assert result.err.strip() == (
        f"kimi-serve: error: --api-key-file {fifo}: API key file is a FIFO, not a regular file "
        "(fix: pass the regular file SGLang reads via --config (mode 600))"
    )
    problem = _within(10, fifo, lambda: key_file_problem(fifo))
    assert problem is not None and "is a FIFO, not a regular file" in problem[0]


def test_raw_text_with_many_unfinished_calls_is_parsed_in_linear_time() -> None:
    """The raw path's tool-call search was a lazy regular expression: on 20,000 call openers without an end it
    retried from each one to the end of the text (quadratic)."""
    from kimi_serve.verify import kimi_format as kf

    started = time.monotonic()
    turn = kf.parse_raw("thought</think>" + kf.SECTION_BEGIN + kf.CALL_BEGIN * 20_000)
    assert time.monotonic() - started < 2.0
    assert turn.calls == [] and "holds no complete" in turn.problems[-1]
