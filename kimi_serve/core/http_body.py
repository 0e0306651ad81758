"""What a response body may hold and how it is read (:mod:`kimi_serve.core.http`'s bounds): the read limits of one
response and of one run (:data:`LIMITS`), the run's total budget, the server-sent-event counter that stops a stream at
its limits as it arrives, and the ``Content-Encoding`` layers undone as the openai SDK's HTTP client (httpx) undoes
them, within the body limit."""

from __future__ import annotations

import threading
import zlib
from dataclasses import dataclass

_MIB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """What verify reads of one response, and of one run."""

    body_bytes: int = 16 * _MIB  # one streamed response body (a 16k-token stream is ~4 MiB)
    document_bytes: int = 4 * _MIB  # one response body that is not a stream (a 16k-token answer is ~100 KiB)
    total_bytes: int = 64 * _MIB  # every response of one run together (what keeps verify within MEMORY_BUDGET)
    sse_line_bytes: int = 1 * _MIB  # one line of a server-sent event stream
    sse_events: int = 100_000  # ``data:`` lines of one stream (a 16k-token answer has ~16k)
    sse_lines: int = 400_000  # every line of one stream: data, blank, comment keep-alives, ids


LIMITS = Limits()
# verify's peak resident memory against any server, interpreter included (docs/verify.md "Read limits"): what it
# reads is held at most about twice (the bytes, and the text merged from them), plus one answer being decoded per
# connection slot; benchmarks/bench_verify_floods.py measures it against answers built to cost
MEMORY_BUDGET_MIB = 256


def size_text(n: int) -> str:
    return f"{n // _MIB} MiB" if n >= _MIB and n % _MIB == 0 else f"{n} bytes"


class ReadBudget:
    """Bytes every request of one run may still read together (thread-safe)."""

    def __init__(self, total: int) -> None:
        self.total, self.left = total, total
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        with self._lock:
            self.left -= n
            return self.left >= 0


class SseCounter:
    """Line lengths and ``data:`` lines of a stream as it arrives (keeping only the head of the current line)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.line = 0  # bytes of the current, unfinished line
        self.head = b""  # its first bytes (to see "data:")
        self.events = 0
        self.lines = 0

    def feed(self, chunk: bytes) -> str | None:
        pieces = chunk.split(b"\n")
        for i, piece in enumerate(pieces):
            if self.line < 5:
                self.head += piece[: 5 - self.line]
            self.line += len(piece)
            if self.line > self.limits.sse_line_bytes:
                return f"{size_text(self.limits.sse_line_bytes)} per server-sent-event line"
            if i < len(pieces) - 1:  # the line ended
                self.lines += 1
                if self.lines > self.limits.sse_lines:
                    return f"{self.limits.sse_lines} lines per stream"
                if self.head.startswith(b"data:"):
                    self.events += 1
                    if self.events > self.limits.sse_events:
                        return f"{self.limits.sse_events} events per stream"
                self.line, self.head = 0, b""
        return None


def cut_lines(body: bytes, most: int) -> tuple[bytes, str | None]:
    parts = body.split(b"\n", most)
    if len(parts) <= most:
        return body, None
    return body[: len(body) - len(parts[-1])], f"{most} lines per stream"


ACCEPTED_ENCODINGS = "gzip, deflate"
_WBITS = {"gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS}


def _inflate(name: str, body: bytes, room: int) -> bytes:
    """One layer of ``name`` undone as httpx does (deflate: zlib-wrapped, else raw), at most ``room + 1`` bytes."""
    try:
        return zlib.decompressobj(_WBITS[name]).decompress(body, room + 1)
    except zlib.error:
        if name != "deflate":
            raise
        return zlib.decompressobj(-zlib.MAX_WBITS).decompress(body, room + 1)


def decode(
    header: str, body: bytes, limits: Limits, budget: ReadBudget, most: int | None = None
) -> tuple[bytes, str | None, str | None]:
    """``(body, encoding fault, limit)``: ``body`` with its ``Content-Encoding`` layers undone, the way the openai SDK's
    HTTP client reads it (gzip and deflate decoded; an encoding it does not know is ignored; br and zstd need
    packages the SDK does not require, and verify did not ask for them)."""
    most = limits.body_bytes if most is None else most
    names = [n.strip().lower() for n in header.split(",") if n.strip() and n.strip().lower() != "identity"]
    for name in reversed(names):
        if name in ("br", "zstd"):
            fault = f"Content-Encoding: {name}, which verify did not accept"
            return body, f"{fault} (it sends Accept-Encoding: {ACCEPTED_ENCODINGS})", None
        if name not in _WBITS:
            continue  # httpx ignores an encoding it does not know and reads the body as it is
        try:
            out = _inflate(name, body, most)
        except zlib.error as exc:
            return body, f"Content-Encoding: {name} on a body that is not {name} data ({exc})", None
        if len(out) > most:
            return out[:most], None, f"{size_text(most)} per response body (decoded)"
        if not budget.take(max(0, len(out) - len(body))):
            return b"", None, f"{size_text(budget.total)} in total for one verify run"
        body = out
    return body, None, None
