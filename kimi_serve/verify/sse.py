"""The server-sent-event grammar the official openai SDK reads, as its stream reader reads it (its ``SSEDecoder``):
lines end at CR, LF or CRLF (nothing else: a U+2028 inside a JSON string is not a line end); a line starting with
``:`` is a comment; ``event``, ``data``, ``id`` and ``retry`` fields, others ignored; a blank line dispatches an event
when an event name, data, a last event id or a retry is pending, and the last event id is **not** reset after a
dispatch (the SSE specification's rule). The SDK then ``json.loads`` every dispatched event's data (``[DONE]`` ends the
stream), so an event dispatched without data makes it raise ``JSONDecodeError``, and an event named ``thread.*`` is
wrapped as an Assistants event and its chunk is lost.

Measured against openai 3.x's reader (``chat.completions.create(stream=True)`` and ``chat.completions.stream``) on a
loopback server: event ids on each event, comment keep-alives without ids, ``retry:`` or ``event:`` next to ``data:``,
CRLF or CR line ends, unknown fields: read whole. Fatal: a comment keep-alive or an extra blank line after an event id
was seen (the id persists, the blank line dispatches an empty event), a ``retry:`` or ``event:`` or ``id:`` block
without data, an ``event: thread.*`` name. verify reads the stream with this grammar and names the construct.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

_END = re.compile(rb"\r\n|\r|\n")  # a line's end


@dataclass(frozen=True)
class SseEvent:
    """One dispatched event: its data, its event name, and (for an event the SDK cannot read) the construct."""

    data: str
    name: str | None = None
    fault: str | None = None  # what the SDK fails on, in words; None: it reads the event


def _empty_cause(*, name: str | None, retry: bool, id_here: bool, comment: bool) -> str:
    if name is not None:
        return f"an `event: {name}` block without a `data:` line"
    if retry:
        return "a `retry:` directive in a block of its own (no `data:` line)"
    if id_here:
        return "an `id:` line in a block of its own (no `data:` line)"
    if comment:
        return "a comment keep-alive (`: ...` then a blank line) after an event id (`id:`) was sent"
    return "an extra blank line after an event id (`id:`) was sent"


def events(body: bytes) -> list[SseEvent]:
    """The events the openai SDK's reader dispatches from ``body``, in order, up to ``[DONE]`` (where it stops
    reading). A block the body does not end with a blank line is not dispatched (the SDK drops it too)."""
    return list(iter_events(body))


def iter_events(body: bytes, end: int | None = None) -> Iterator[SseEvent]:
    """:func:`events` one at a time (a long stream is never held as a list of lines or events); ``end``: read only
    ``body[:end]`` (without copying it)."""
    yield from SseFeed().read(body, len(body) if end is None else end)


class _Grammar:
    """The reader's state between lines: :meth:`line` takes one line (without its end) and returns the event a blank
    line dispatches. ``done``: ``[DONE]`` was dispatched."""

    def __init__(self) -> None:
        self.name: str | None = None
        self.data: list[str] = []
        self.last_id: str | None = None
        self.retry: int | None = None
        self.id_here = self.comment = self.done = False

    def line(self, line: str) -> SseEvent | None:
        if not line:
            if self.name is None and not self.data and not self.last_id and self.retry is None:
                self.comment = self.id_here = False
                return None
            fault = None
            if not self.data:
                fault = _empty_cause(
                    name=self.name, retry=self.retry is not None, id_here=self.id_here, comment=self.comment
                )
            elif self.name is not None and self.name.startswith("thread."):
                fault = f"an `event: {self.name}` name (the SDK takes it for an Assistants event and loses the chunk)"
            event = SseEvent("\n".join(self.data), self.name, fault)
            self.done = event.data.startswith("[DONE]")
            self.name, self.data, self.retry = None, [], None
            self.id_here = self.comment = False
            return event
        if line.startswith(":"):
            self.comment = True
            return None
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            self.name = value or None
        elif field == "data":
            self.data.append(value)
        elif field == "id" and "\0" not in value:
            self.last_id, self.id_here = value, True
        elif field == "retry":
            self.retry = _int(value, self.retry)
        return None


class SseFeed:
    """The grammar over a stream read piece by piece (``chat`` shows each event as it comes): :meth:`feed` takes
    the bytes that arrived and returns the events they complete. A line end split across pieces (CR, then LF in the
    next piece) is one line end, a UTF-8 character split across pieces one character (a line is decoded once whole)."""

    def __init__(self) -> None:
        self._grammar = _Grammar()
        self._tail = b""

    @property
    def done(self) -> bool:
        return self._grammar.done

    def feed(self, piece: bytes) -> list[SseEvent]:
        if self.done:
            return []
        data = self._tail + piece
        # the tail holds no line end (but perhaps a last CR): only the new bytes are searched, so a body with no line
        # end costs one pass, not one per piece
        return list(self.read(data, len(data), max(0, len(self._tail) - 1), more=True))

    def read(self, data: bytes, end: int, start: int = 0, *, more: bool = False) -> Iterator[SseEvent]:
        """The events of the lines in ``data[:end]`` (searched for line ends from ``start``), each line decoded on its
        own: a line end is never part of a UTF-8 sequence, so this reads as decoding the whole body would, in one
        pass, without a second copy of a 16 MiB body as text (a line-matching regular expression retried from every
        byte of a body with no line end: 200 KB of ``[`` took minutes). ``more``: more bytes may follow, so the
        unended rest is kept for them (a CR at the end may be the first half of a CRLF)."""
        grammar, line_start = self._grammar, 0
        for found in _END.finditer(data, start, end):
            if more and found.end() == len(data) and found.group() == b"\r":
                break  # a CR at the end: the LF of a CRLF may come in the next piece
            event = grammar.line(data[line_start : found.start()].decode("utf-8", errors="replace"))  # no copy held
            line_start = found.end()
            if event is not None:
                yield event
                if grammar.done:
                    break  # the SDK stops reading here
        if more:
            self._tail = b"" if self._grammar.done else data[line_start:]


def _int(value: str, default: int | None) -> int | None:
    try:
        return int(value)
    except ValueError:  # the SDK ignores a retry that is not a number
        return default
