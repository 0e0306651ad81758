"""Fuzzing verify with mutated server answers: whatever a server (or a proxy in front of it) sends, verify ends with a
verdict (exit 0, 1 or 3), never a kimi-serve bug (exit 70), and `--json` prints one valid UTF-8 JSON document.

One loopback stand-in (tests/contract_server.py, not SGLang) plays the correct server; its ``rewrite`` hook changes
one answer of each run, taken from the correct one: truncation, deep nesting, huge counts (events, comment lines, tool
calls), values of the wrong type, bad tool-call indices, control characters and lone surrogates, Content-Encoding
headers that do or do not match the body, a wrong Content-Type or status, invalid UTF-8. The seed and the count are
fixed, so a failure replays: the assertion names the case and its mutation.

Most cases run verify's quick suite through ``run_verify`` and the command's own output steps (the table, the plain
lines, the JSON report, each encoded as UTF-8 as the terminal would); every 8th case runs the whole command in-process
(``kimi-serve verify --json``). The /proc listener scan reads no server input and costs ~0.2 s a run, so it is left
out here (tests/test_verify_listeners.py holds it).
"""

from __future__ import annotations

import gzip
import json
import random
import re
import zlib
from collections.abc import Callable
from typing import Any

import pytest
from contract_server import ContractServer

from kimi_serve.core.findings import SKIP, Finding
from kimi_serve.verify import run_verify
from kimi_serve.verify.render import render_lines, render_table

SEED = 20261204
CASES = 200
CLI_EVERY = 8
TIMEOUT = 5.0
PATHS = ("/v1/chat/completions",) * 7 + (
    "/v1/models",
    "/v1/models",
    "/model_info",
    "/health",
    "/server_info",
    "/parse_function_call",
)
NASTY = (
    "\x1b[2J\x1b[H",
    "\ud800",
    "a\udfffb",
    "line\nverify: contract holds (4/4 probes passed in 0.1s)",
    "\r\x00\x07",
    "\u202eevil",
    "\x9b31m",
    "",
    "x" * 5000,
)
WRONG = (None, True, 0, -1, 1.5, 10**30, "", "0", [], {}, [1, 2], {"a": None})
INDICES = (-1, -2, 10**20, 128, 129, "0", 1.5, None, True, [0], {"i": 0})

Rewrite = Callable[[str, int, dict[str, str], bytes], tuple[int, dict[str, str], bytes]]


def _slots(value: Any, out: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """Every (container, key) in a decoded JSON value, to replace one of them."""
    if isinstance(value, dict):
        for k, v in value.items():
            out.append((value, k))
            _slots(v, out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.append((value, i))
            _slots(v, out)
    return out


_DEEP = re.compile(r'"\\u0000deep(\d+)"')  # a marker value, written out as nesting after json.dumps


def _deep(rng: random.Random) -> str:
    return f"\0deep{rng.choice((65, 70, 200, 1200, 5000, 60_000))}"


def _dumps(doc: Any) -> bytes:
    """``doc`` as JSON text, each deep marker as that many nested lists and objects (json.dumps itself would
    recurse past the interpreter's limit)."""
    text = json.dumps(doc)
    return _DEEP.sub(lambda m: '[{"k": ' * int(m.group(1)) + "1" + "}]" * int(m.group(1)), text).encode()


def _mutate_value(doc: Any, rng: random.Random) -> Any:
    slots = _slots(doc, [])
    kind = rng.choice(("wrong", "nasty", "deep", "index", "drop", "many"))
    targets = ([(c, k) for c, k in slots if k == "index"] if kind == "index" else []) or slots
    if not targets:
        return rng.choice(WRONG)
    container, key = rng.choice(targets)
    if kind == "wrong":
        container[key] = rng.choice(WRONG)
    elif kind == "nasty":
        container[key] = rng.choice(NASTY)
    elif kind == "deep":
        container[key] = _deep(rng)
    elif kind == "index":
        container[key] = rng.choice(INDICES)
    elif kind == "drop" and isinstance(container, dict):
        del container[key]
    elif kind == "many" and isinstance(container[key], list) and container[key]:
        container[key] = container[key] * rng.choice((2, 50, 300, 3000))
    return doc


def _json_body(body: bytes, rng: random.Random) -> bytes:
    try:
        doc = json.loads(body)
    except ValueError:
        return body
    return _dumps(_mutate_value(doc, rng))


def _sse_body(body: bytes, rng: random.Random) -> bytes:
    events = [e for e in body.split(b"\n\n") if e]
    choice = rng.random()
    if choice < 0.15:  # many deltas: one event repeated
        i = rng.randrange(len(events))
        events[i:i] = [events[i]] * rng.choice((100, 2000, 20_000))
    elif choice < 0.25:  # comment lines (keep-alives) in bulk
        return b":\n" * rng.choice((10, 1000, 500_000)) + body
    elif choice < 0.35:  # many tool calls, each its own index
        call = {"index": 0, "id": "functions.get_weather:0", "type": "function", "function": {"name": "get_weather"}}
        head = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}}]}
        extra = []
        for n in range(rng.choice((10, 200, 5000))):
            head["choices"][0]["delta"] = {"tool_calls": [{**call, "index": n}]}
            extra.append(b"data: " + json.dumps(head).encode())
        events[1:1] = extra
    elif choice < 0.45:  # SSE framing faults
        i = rng.randrange(len(events))
        events[i] = rng.choice((b"id: 1\n", b"event: thread.x\n", b"retry: x\n", b": ping\n\n", b"")) + events[i]
    else:  # one chunk's JSON changed
        i = rng.randrange(len(events))
        if events[i].startswith(b"data: {"):
            events[i] = b"data: " + _json_body(events[i][6:], rng)
    return b"\n\n".join(events) + b"\n\n"


def _frame(status: int, headers: dict[str, str], body: bytes, rng: random.Random) -> tuple[int, bytes]:
    """The mutations of the HTTP framing: truncation, encodings, content type, status, invalid UTF-8."""
    kind = rng.choice(("truncate", "encoding", "ctype", "status", "bytes"))
    if kind == "truncate":
        body = body[: rng.randrange(len(body) + 1)]
    elif kind == "encoding":
        name = rng.choice(("gzip", "gzip", "deflate", "br", "zstd", "x-foo", "gzip, gzip", "identity"))
        headers["Content-Encoding"] = name
        if rng.random() < 0.5 and name == "gzip":
            body = gzip.compress(body)
        elif rng.random() < 0.5 and name == "deflate":
            body = zlib.compress(body)
        elif rng.random() < 0.2 and name == "gzip":
            body = gzip.compress(b"\0" * rng.choice((1024, 64 * 1024 * 1024)))  # a bomb past the body limit
    elif kind == "ctype":
        headers["Content-Type"] = rng.choice(("text/html", "text/event-stream", "application/json", "", "x/y"))
    elif kind == "status":
        status = rng.choice((200, 204, 301, 400, 401, 404, 429, 500, 503, 999))
    else:
        at = rng.randrange(len(body) + 1)
        body = body[:at] + rng.choice((b"\xff\xfe", b"\xed\xa0\x80", b"\x1b[2J", b"\0")) + body[at:]
    return status, body


def _mutation(case: int) -> tuple[str, str, Rewrite]:
    """Case ``case``'s path and mutation: drawn from the fixed seed; each request's change is a function of the case
    and the request (the probes run concurrently, so it must not depend on their order)."""
    rng = random.Random(SEED * 1000 + case)
    path = rng.choice(PATHS)
    layer = "frame" if path == "/health" else rng.choice(("content", "content", "frame"))

    def rewrite(at: str, status: int, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        if at != path:
            return status, headers, body
        local = random.Random(f"{SEED}:{case}:{len(body)}:{headers.get('Content-Type')}")
        if layer == "frame":
            status, body = _frame(status, headers, body, local)
        elif "event-stream" in headers.get("Content-Type", ""):
            body = _sse_body(body, local)
        else:
            body = _json_body(body, local)
        return status, headers, body

    return path, layer, rewrite


@pytest.fixture
def quick_listeners(monkeypatch: pytest.MonkeyPatch) -> None:
    def skip(port: int, expected: Any) -> tuple[list[Any], list[Finding]]:
        return [], [Finding("verify", "listeners", SKIP, "not checked in the fuzz test")]

    monkeypatch.setattr("kimi_serve.verify.privilege.check_listeners", skip)


def _one_json_document(text: str) -> dict[str, Any]:
    text.encode("utf-8")  # no lone surrogate
    doc = json.loads(text)  # exactly one document (json.loads refuses trailing data)
    assert isinstance(doc, dict)
    return doc


@pytest.mark.usefixtures("quick_listeners")
def test_verify_ends_in_a_verdict_whatever_the_server_sends(
    loopback_port: Callable[[], int], cli: Callable[..., Any]
) -> None:
    current: list[Rewrite] = []

    def rewrite(at: str, status: int, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        return current[-1](at, status, headers, body)

    seen: dict[int, int] = {}
    with ContractServer(port=loopback_port(), rewrite=rewrite) as srv:
        for case in range(CASES):
            path, layer, mutation = _mutation(case)
            current.append(mutation)
            label = f"case {case} (seed {SEED}, {layer} of {path})"
            if case % CLI_EVERY == 0:
                result = cli("verify", "--host", srv.host, "--json", "--timeout", str(TIMEOUT))
                assert result.code in (0, 1, 3), f"{label}: exit {result.code}: {result.err[-2000:]}"
                doc = _one_json_document(result.out)
                assert doc["exit_code"] == result.code, label
                code = result.code
            else:
                report = run_verify(srv.host, timeout=TIMEOUT)
                code = report.exit_code
                assert code in (0, 1, 3), label
                for text in (render_lines(report), render_table(report)):
                    text.encode("utf-8")
                    assert "\x1b" not in text and "\r" not in text, label
                    assert sum(line.startswith("verify: ") for line in text.splitlines()) == 1, label
                assert _one_json_document(report.to_json())["exit_code"] == code, label
            seen[code] = seen.get(code, 0) + 1
    assert seen.get(1, 0) > CASES // 4, seen  # the mutations do break the contract; most are caught
