"""What verify does with server text before it trusts it: JSON parsed within bounds, strings made safe to show.

:func:`loads` is the one JSON decoder for what a server sends. Before ``json.loads`` it counts the brackets and
commas outside strings (C-speed passes in linear time and memory, :func:`_structure`), so a document nested deeper
than :data:`MAX_DEPTH`, holding more than :data:`MAX_VALUES` values, or more objects and lists than the caller's
:class:`Containers` budget is refused with a :class:`WireLimit` (a finding names it) instead of a ``RecursionError``
or gigabytes of small objects. Everything verify walks afterwards recursively (the stream merge, the schema
validator) then stays far below the interpreter's recursion limit.

:func:`printable` keeps a model id or an error body from forging or hiding a line of the report, :func:`json_safe`
keeps ``--json`` valid UTF-8, :func:`shown` quotes a server's value as JSON text in a finding.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 64  # objects and lists inside each other in one document (SGLang's deepest answer nests 6)
# objects and lists in one answer (a stream's chunks together): a 16k-token stream of tool-call argument deltas holds
# ~115k (7 a chunk); 250k empty lists already take ~15 MB of Python objects
MAX_CONTAINERS = 250_000
# values in one document (its commas and containers): what one decoded document may hold at once, ~60 bytes each
# (a plain answer held whole: 4 MiB of `["ab","ab",...]` is 200 MB of Python strings); a chunk has ~15, a plain
# answer with its token ids (the lossless probe) ~20k
MAX_VALUES = 100_000
_KEEP = b'"[]{},'
_NOT_KEPT = bytes(b for b in range(256) if b not in _KEEP)
# what is left of a string once only quotes, brackets and commas are: a quote, those, its closing quote (or the end)
_IN_STRING = re.compile(rb'"[^"]*(?:"|\Z)')
_BLOCK = 64 * 1024  # brackets inside strings are removed this many bytes at a time (re.sub holds ~230 B a match)
_OPEN = frozenset(b"[{")
_SURROGATE = re.compile("[\ud800-\udfff]")


class WireLimit(ValueError):
    """A server document past one of verify's bounds (``limit`` names it); the document is not decoded."""

    def __init__(self, limit: str) -> None:
        super().__init__(limit)
        self.limit = limit


class Containers:
    """Objects and lists that the documents of one answer may hold together (a stream's chunks share one)."""

    def __init__(self, total: int) -> None:
        self.total = self.left = total

    def take(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise WireLimit(f"{self.total} JSON objects and lists per answer")


def _depth(brackets: bytes) -> int:
    """The deepest nesting of ``brackets``, walked until the first close without an open (no JSON past it): at most
    twice the opens plus one step, whatever follows (16 MiB of ``]`` is one step)."""
    depth = deepest = 0
    for b in brackets:
        depth = depth + 1 if b in _OPEN else depth - 1
        if depth < 0:
            break
        deepest = max(deepest, depth)
    return deepest


def _structure(raw: bytes) -> bytes:
    """The brackets and commas of ``raw`` outside its strings, in order, in passes at C speed and in memory linear in
    the size (no object per string). Escaped backslashes, then escaped quotes go first (in valid JSON a backslash is
    only inside a string, where pairs count from the left as ``bytes.replace`` pairs them); then everything but
    quotes, brackets and commas; then ``""`` (an empty string, or the gap between two strings: what is inside
    either stays inside); what is left inside quotes goes block by block, the quote parity carried from block to
    block. An unterminated string runs to the end (the document is then no JSON)."""
    kept = raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_KEPT).replace(b'""', b"")
    out, inside = [], False
    for start in range(0, len(kept), _BLOCK):
        block = kept[start : start + _BLOCK]
        out.append(_IN_STRING.sub(b"", b'"' + block if inside else block))
        inside ^= block.count(b'"') % 2 == 1
    return b"".join(out)


def loads(data: str | bytes, containers: Containers | None = None) -> Any:
    """``json.loads(data)`` within :data:`MAX_DEPTH` and ``containers``; ValueError when it is not JSON,
    :class:`WireLimit` (a ValueError too) when it is past a bound."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    structure = _structure(raw)
    commas = structure.count(b",")
    brackets = structure.replace(b",", b"") if commas else structure
    opened = len(brackets) - brackets.count(b"]") - brackets.count(b"}")
    if opened + commas > MAX_VALUES:
        raise WireLimit(f"{MAX_VALUES} JSON values in one document")
    (containers or Containers(MAX_CONTAINERS)).take(opened)
    if opened > MAX_DEPTH and _depth(brackets) > MAX_DEPTH:
        raise WireLimit(f"{MAX_DEPTH} levels of nested JSON objects and lists")
    try:
        return json.loads(data)
    except RecursionError:  # unreachable below MAX_DEPTH; kept so no input can end verify in a traceback
        raise WireLimit(f"{MAX_DEPTH} levels of nested JSON objects and lists") from None


_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str) -> str:
    """``text`` with every character a terminal would not simply show (control characters, ESC, newlines, lone
    surrogates, format characters such as bidirectional overrides) written as a Python-style escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def json_safe(value: Any) -> Any:
    """``value`` (decoded JSON, or a report built from it) with every lone surrogate in its strings written out as
    ``\\udXXX``, so it encodes as valid UTF-8 JSON. Only strings change."""
    if isinstance(value, str):
        return _SURROGATE.sub(lambda m: _escape(m.group(0)), value) if _SURROGATE.search(value) else value
    if isinstance(value, dict):
        return {json_safe(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def shown(value: Any, none: str = "", limit: int = 80) -> str:
    """A value the server sent, as its reader knows it in a finding: its JSON text (``null``, ``true``, ``7``,
    ``"stop"``, ``{"type": "stop"}``), never a Python repr (``None``, ``True``, ``'stop'``); ``none`` says what a null
    (or a missing key) means there (``null (no matched stop)``). Cut to ``limit`` characters, its length said."""
    try:
        text = json.dumps(json_safe(value), ensure_ascii=False)
    except (TypeError, ValueError):  # not decoded JSON (a caller's own value): its type, not its repr
        text = type(value).__name__
    if value is None and none:
        text = f"null ({none})"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"
