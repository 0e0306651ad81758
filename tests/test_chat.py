"""`kimi-serve chat` against a stand-in OpenAI server on loopback (a real HTTP server, real streams; the simulator's
own cases are tests/test_chat_sglang.py): the answer streamed as it arrives, the reasoning apart, tool calls as name
and JSON arguments, raw Kimi markup named with the flags that fix it (exit 1), the key from $KIMI_SERVE_API_KEY, a
prompt from a pipe, a line-by-line session on a terminal, colour only on a terminal without NO_COLOR, and bad input as
one line."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kimi_serve.core.errors import ExitCode
from kimi_serve.verify.chat import RAW_MARKUP

MODEL = "kimi-k2.5-stand-in"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    doc = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


class StandIn:
    """A loopback OpenAI server: /v1/models, and /v1/chat/completions streaming ``script`` (delta dicts); with
    ``gate`` it holds the stream after the first chunk until the gate opens. ``requests``: the bodies it got."""

    def __init__(self, port: int) -> None:
        self.script: list[dict[str, Any]] = [{"role": "assistant", "content": ""}, {"content": "4"}]
        self.status = 200
        self.gate: threading.Event | None = None
        self.requests: list[dict[str, Any]] = []
        self.auth: list[str | None] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                body = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                stand_in.requests.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                stand_in.auth.append(self.headers.get("Authorization"))
                if stand_in.status != 200:
                    body = json.dumps({"object": "error", "message": "Invalid API Key", "code": 401}).encode()
                    self.send_response(stand_in.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for i, delta in enumerate(stand_in.script):
                    self.wfile.write(_chunk(delta))
                    self.wfile.flush()
                    if i == 1 and stand_in.gate is not None:
                        stand_in.gate.wait(30)
                self.wfile.write(_chunk({}, "stop") + b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.host = f"127.0.0.1:{port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def stand_in(loopback_port: Callable[[], int]) -> Iterator[StandIn]:
    server = StandIn(loopback_port())
    yield server
    server.server.shutdown()
    server.server.server_close()


def _spawn(*args: str, **kw: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "kimi_serve", "chat", *args], **kw)


RAW = {
    "tool-call tokens": "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>',
    "K2.5 think markers": "<think>The user asks for 2+2.</think>4",
    "Kimi-VL think markers": "◁think▷The user asks for 2+2.◁/think▷4",
}


@pytest.mark.parametrize("name", sorted(RAW))
def test_raw_kimi_markup_is_named_with_the_flags_that_fix_it(cli, stand_in: StandIn, name: str) -> None:  # type: ignore[no-untyped-def]
    text = RAW[name]
    stand_in.script = [{"role": "assistant", "content": ""}, {"content": text[:20]}, {"content": text[20:]}]
    res = cli("chat", "--host", stand_in.host, "What is 2+2?")
    assert res.code == ExitCode.FAILED, (res.out, res.err)
    assert RAW_MARKUP in res.err and "--tool-call-parser kimi_k2 --reasoning-parser kimi_k2" in res.err
    assert text in res.out  # what the server sent is shown, then named


def test_clean_answer_reasoning_apart_and_tool_calls_structured(cli, stand_in: StandIn, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("KIMI_SERVE_API_KEY", "sk-env-key")
    call = {"index": 0, "id": "functions.get_weather:0", "type": "function"}
    stand_in.script = [
        {"role": "assistant", "content": None, "reasoning_content": "The user wants "},
        {"reasoning_content": "the weather."},
        {"content": "Let me check."},
        {"tool_calls": [{**call, "function": {"name": "get_weather", "arguments": '{"city": '}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]},
    ]
    res = cli("chat", "--host", stand_in.host, "weather in Paris?")
    assert res.code == 0, res.err
    assert res.out == 'Let me check.\ntool call: get_weather {"city": "Paris"}\n'
    assert "[reasoning] The user wants the weather.\n" in res.err and "raw Kimi markup" not in res.err
    sent = stand_in.requests[0]
    assert sent["stream"] is True and sent["model"] == MODEL
    assert sent["messages"] == [{"role": "user", "content": "weather in Paris?"}]
    assert stand_in.auth == ["Bearer sk-env-key"]


def test_the_answer_is_shown_while_it_streams(stand_in: StandIn) -> None:
    stand_in.gate = threading.Event()
    stand_in.script = [{"role": "assistant", "content": "Hel"}, {"content": "lo"}, {"content": " world"}]
    child = _spawn("--host", stand_in.host, "hi", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        seen = b""
        deadline = time.monotonic() + 60
        assert child.stdout is not None
        while b"Hello" not in seen and time.monotonic() < deadline:
            if select.select([child.stdout], [], [], 1)[0]:
                seen += os.read(child.stdout.fileno(), 4096)
        assert seen == b"Hello" and child.poll() is None  # shown before the stream ended
    finally:
        stand_in.gate.set()
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert seen + out == b"Hello world\n"


def test_one_prompt_from_a_pipe(stand_in: StandIn) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "kimi_serve", "chat", "--host", stand_in.host],
        input=b"hello from a pipe\n",
        capture_output=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert stand_in.requests[0]["messages"] == [{"role": "user", "content": "hello from a pipe"}]
    assert res.stdout == b"4\n"


def _pty_session(args: list[str], lines: list[bytes], env: dict[str, str]) -> tuple[int, bytes]:
    """Run chat with stdin, stdout and stderr on a pty; type ``lines`` one by one, then Ctrl-D."""
    main, child_end = pty.openpty()
    child = _spawn(*args, stdin=child_end, stdout=child_end, stderr=child_end, env=env)
    os.close(child_end)
    got = b""

    def read_until(needle: bytes) -> None:
        nonlocal got
        deadline = time.monotonic() + 60
        while got.count(b"> ") < needle.count(b"> ") if needle.startswith(b"> ") else needle not in got:
            if time.monotonic() > deadline:
                return
            if select.select([main], [], [], 1)[0]:
                try:
                    got += os.read(main, 4096)
                except OSError:
                    return

    try:
        for i, line in enumerate(lines):
            read_until(b"> " * (i + 1))  # the i-th prompt: the answer before it is shown
            os.write(main, line + b"\n")
        read_until(b"> " * (len(lines) + 1))
        os.write(main, b"\x04")
        code = child.wait(60)
        read_until(b"\0")  # what is left
    finally:
        os.close(main)
    return code, got


def test_a_terminal_gets_a_line_by_line_session_with_history(stand_in: StandIn) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    code, shown = _pty_session(["--host", stand_in.host], [b"first", b"second"], env)
    assert code == 0, shown
    assert [r["messages"][-1]["content"] for r in stand_in.requests] == ["first", "second"]
    assert stand_in.requests[1]["messages"][:2] == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "4"},
    ]
    assert b"one prompt a line" in shown


@pytest.mark.parametrize("no_color", [None, "1"])
def test_reasoning_is_dim_on_a_terminal_unless_no_color(stand_in: StandIn, no_color: str | None) -> None:
    stand_in.script = [{"role": "assistant", "reasoning_content": "thinking it over"}, {"content": "4"}]
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    if no_color:
        env["NO_COLOR"] = no_color
    code, shown = _pty_session(["--host", stand_in.host], [b"2+2?"], env)
    assert code == 0, shown
    if no_color:
        assert b"\x1b[" not in shown and b"[reasoning] thinking it over" in shown
    else:
        assert b"\x1b[2mthinking it over\x1b[0m" in shown


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--host", "127.0.0.1:30000", "--profile", "sim", "hi"], "--host and --profile both"),
        (["--set", "server.port=1", "hi"], "--set without --profile"),
        (["--host", "a b", "hi"], "--host"),
        (["--profile", "nosuch-profile", "hi"], "nosuch-profile"),
    ],
)
def test_bad_input_is_one_line_exit_2(cli, args: list[str], needle: str) -> None:  # type: ignore[no-untyped-def]
    res = cli("chat", *args)
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert res.code == ExitCode.USAGE and len(lines) == 1 and needle in lines[0], res.err
    assert "Traceback" not in res.err and res.out == ""


def test_empty_prompt_and_bad_tools_file(cli, stand_in: StandIn, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    res = cli("chat", "--host", stand_in.host, "  ")
    assert res.code == ExitCode.USAGE and "PROMPT: the prompt is empty" in res.err
    bad = tmp_path / "tools.json"
    bad.write_text('{"name": "get_weather"}')
    res = cli("chat", "--host", stand_in.host, "--tools", str(bad), "hi")
    assert res.code == ExitCode.USAGE and "--tools" in res.err and "is not a list of tools" in res.err
    assert stand_in.requests == []


def test_unreachable_is_3_and_an_error_answer_is_1(cli, stand_in: StandIn, loopback_port) -> None:  # type: ignore[no-untyped-def]
    res = cli("chat", "--host", f"127.0.0.1:{loopback_port()}", "hi")
    assert res.code == ExitCode.UNREACHABLE and "connection refused" in res.err and "Traceback" not in res.err
    stand_in.status = 401
    res = cli("chat", "--host", stand_in.host, "hi")
    assert res.code == ExitCode.FAILED and len(res.err.strip().splitlines()) == 1, res.err


@pytest.mark.parametrize(
    "body",
    [
        b'data: {"a": "\xc3\xa9\xe2\x97\x81"}\n\ndata: [DONE]\n\ndata: after\n\n',
        b"data: one\r\n\r\ndata: two\r\r: keep-alive\r\n\r\n",
        b"id: 7\nevent: x\ndata: a\ndata: b\n\n: ping\n\nretry: 5\n\ndata: tail-without-blank",
    ],
)
def test_the_stream_fed_byte_by_byte_reads_as_the_whole_body(body: bytes) -> None:
    """chat's reader (SseFeed) is verify's SSE grammar: a CRLF or a UTF-8 character split across pieces is one."""
    from kimi_serve.verify.sse import SseFeed, events

    feed = SseFeed()
    got = [e for i in range(len(body)) for e in feed.feed(body[i : i + 1])]
    assert got == events(body)


def test_a_profile_gives_the_address_and_its_key_file_the_key(  # type: ignore[no-untyped-def]
    cli, stand_in: StandIn, tmp_path: Path, write_profile, monkeypatch
) -> None:
    secret = tmp_path / "secrets.yaml"
    secret.write_text("api-key: sk-from-the-key-file\n")
    secret.chmod(0o600)
    port = stand_in.host.rsplit(":", 1)[1]
    path = write_profile(f"extends: sim\nserver:\n  host: 0.0.0.0\n  api_key_file: {secret}\n")
    monkeypatch.setenv("KIMI_SERVE_API_KEY", "sk-stale-env-key")  # the file the server reads beats the shell
    res = cli("chat", "--profile", str(path), "--set", f"server.port={port}", "hi")
    assert res.code == 0, res.err
    assert stand_in.auth == ["Bearer sk-from-the-key-file"] and res.out == "4\n"
