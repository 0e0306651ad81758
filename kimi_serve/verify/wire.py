"""What verify does with server text before it trusts it: JSON parsed within bounds, strings made safe to show.

:func:`loads` is the one JSON decoder for what a server sends. Before ``json.loads`` it counts the brackets outside
strings (C-speed: strings removed by one regular expression, the rest reduced to brackets by ``bytes.translate``), so
a document nested deeper than :data:`MAX_DEPTH` or holding more objects and lists than the caller's
:class:`Containers` budget is refused with a :class:`WireLimit` (a finding names it) instead of a ``RecursionError``
or gigabytes of small objects. Everything verify walks afterwards recursively (the stream merge, the schema
validator) then stays far below the interpreter's recursion limit.

:func:`printable` escapes what a terminal would act on (ESC and every other control character, newlines, lone
surrogates, bidirectional overrides) so a model id or an error body cannot forge or hide a line of the report;
:func:`json_safe` makes a decoded value valid Unicode again (lone surrogates written out), so ``--json`` stays UTF-8.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 64  # objects and lists inside each other in one document (SGLang's deepest answer nests 6)
# objects and lists in one answer (a stream's chunks together): a 16k-token stream of tool-call argument deltas holds
# ~115k (7 a chunk); 250k empty lists already take ~15 MB of Python objects
MAX_CONTAINERS = 250_000
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
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
    depth = deepest = 0
    for b in brackets:
        depth = depth + 1 if b in _OPEN else depth - 1
        deepest = max(deepest, depth)
    return deepest


def loads(data: str | bytes, containers: Containers | None = None) -> Any:
    """``json.loads(data)`` within :data:`MAX_DEPTH` and ``containers``; ValueError when it is not JSON,
    :class:`WireLimit` (a ValueError too) when it is past a bound."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    opened = len(brackets) - brackets.count(b"]") - brackets.count(b"}")
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
