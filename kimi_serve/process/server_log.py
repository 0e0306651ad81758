"""A server's log file: appended with a size cap (rotated to ``FILE.1``), and read from its end.

- :class:`CappedLog`: before a write would pass ``max_bytes``, ``FILE`` becomes ``FILE.1`` and a new one starts, so
  a log takes at most 2 x ``max_bytes`` on disk and keeps at least the newest ``max_bytes``.
- :func:`write_tail`, :func:`follow`: the last N lines of ``FILE.1`` + ``FILE`` as one stream, found reading blocks
  backwards (memory stays a few blocks whatever the size); ``follow`` goes on like ``tail -F``, across a rotation.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TextIO

LOG_MAX_BYTES = 100 * 1024 * 1024  # one log file's cap: it rotates to FILE.1 beyond this
BLOCK = 64 * 1024  # what is read (and held) at once


def rotated(path: Path) -> Path:
    """Where ``path`` goes when it reaches its cap: ``FILE.1``."""
    return path.with_name(path.name + ".1")


class CappedLog:
    """``path`` opened for appending, rotated to ``FILE.1`` before a write would pass ``max_bytes``. Not locked:
    the caller serialises writes (one lock around :meth:`write`)."""

    def __init__(self, path: Path, max_bytes: int = LOG_MAX_BYTES) -> None:
        self.path, self.max_bytes = path, max_bytes
        self._file: BinaryIO = path.open("ab")
        self._size = os.fstat(self._file.fileno()).st_size

    @property
    def closed(self) -> bool:
        return self._file.closed

    def write(self, data: bytes) -> None:
        """Append ``data``; a log that cannot be written (disk full, its folder removed) loses it rather than stop
        the reader that keeps the server's output pipe drained."""
        if self._size and self._size + len(data) > self.max_bytes:
            self._rotate()
        if self._file.closed:
            return
        try:
            self._file.write(data)
            self._file.flush()
        except OSError:
            return
        self._size += len(data)

    def _rotate(self) -> None:
        self._file.close()
        with contextlib.suppress(OSError):  # the file went away or cannot be moved: start over rather than stop
            os.replace(self.path, rotated(self.path))
        with contextlib.suppress(OSError):  # cannot be created again: closed, later writes are dropped
            self._file = self.path.open("wb")
        self._size = 0

    def close(self) -> None:
        self._file.close()


def _tail_start(segments: Sequence[tuple[BinaryIO, int]], wanted: int) -> tuple[int, int]:
    """Scan ``segments`` (files and the sizes to read them to, oldest first: one stream) backwards from the end:
    where their last ``wanted`` lines begin, as (segment, offset); (0, 0) when the stream has no more lines. A final
    newline ends the last line, it does not start one."""
    found, final = 0, True
    for k in range(len(segments) - 1, -1, -1):
        f, pos = segments[k]
        while pos > 0:
            size = min(BLOCK, pos)
            pos -= size
            f.seek(pos)
            block = f.read(size)
            i = len(block)
            if final and block:
                final = False
                if block.endswith(b"\n"):
                    i -= 1
            while (i := block.rfind(b"\n", 0, i)) >= 0:
                found += 1
                if found == wanted:
                    return k, pos + i + 1
    return 0, 0


@dataclass(frozen=True)
class Position:
    """A place in a log file that survives its rotation: the file's (device, inode) and an offset in it."""

    file: tuple[int, int]
    offset: int


def write_tail(path: Path, lines: int, out: TextIO) -> Position:
    """Write the last ``lines`` lines of ``path`` (``FILE.1`` then ``FILE``, as one log) to ``out``; return where
    they end (where :func:`follow` goes on). Raises OSError when ``path`` cannot be read."""
    with contextlib.ExitStack() as stack:
        current = stack.enter_context(path.open("rb"))
        own = os.fstat(current.fileno())
        end = Position((own.st_dev, own.st_ino), own.st_size)
        if lines <= 0:
            return end
        segments: list[tuple[BinaryIO, int]] = [(current, end.offset)]
        with contextlib.suppress(OSError):
            older = stack.enter_context(rotated(path).open("rb"))
            st = os.fstat(older.fileno())
            if (st.st_dev, st.st_ino) != end.file:  # not the file just rotated under us
                segments.insert(0, (older, st.st_size))
        k, offset = _tail_start(segments, lines)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        last = ""
        for f, stop in segments[k:]:
            f.seek(offset)
            left, offset = stop - offset, 0
            while left > 0 and (block := f.read(min(BLOCK, left))):
                left -= len(block)
                if text := decoder.decode(block):
                    out.write(text)
                    last = text
        if text := decoder.decode(b"", final=True):
            out.write(text)
            last = text
        if last and not last.endswith("\n"):
            out.write("\n")
        out.flush()
    return end


def follow(
    path: Path,
    out: TextIO,
    *,
    start: Position | None = None,
    stop: Callable[[], bool] = lambda: False,
    poll_s: float = 0.5,
) -> None:
    """Write what is appended to ``path`` from ``start`` (where :func:`write_tail` ended; default: its end now) as it
    comes, like ``tail -F``, until ``stop()``: when ``path`` was rotated meanwhile, the rest of the old file (now
    ``FILE.1``) first, then the new one from its start."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    f = _open_at(path, start)
    try:
        while not stop():
            block = f.read(BLOCK)
            if block:
                out.write(decoder.decode(block))
                out.flush()
                continue
            if _identity(path) not in (None, _identity(f)):  # rotated: go on in the new file
                f.close()
                f = path.open("rb")
                continue
            time.sleep(poll_s)
    finally:
        f.close()


def _open_at(path: Path, start: Position | None) -> BinaryIO:
    if start is None:
        f = path.open("rb")
        f.seek(0, os.SEEK_END)
        return f
    for candidate in (path, rotated(path)):  # the file the tail ended in, wherever a rotation put it
        try:
            f = candidate.open("rb")
        except OSError:
            continue
        if _identity(f) == start.file:
            f.seek(start.offset)
            return f
        f.close()
    return path.open("rb")  # rotated away twice since: the new file from its start


def _identity(file: Path | BinaryIO) -> tuple[int, int] | None:
    """(device, inode) of a path (None: there is none) or an open file."""
    try:
        st = os.stat(file) if isinstance(file, Path) else os.fstat(file.fileno())
    except OSError:
        return None
    return st.st_dev, st.st_ino


def tail_bytes(path: Path, size: int = BLOCK) -> bytes:
    """The last ``size`` bytes of ``path``'s log (``FILE.1`` + ``FILE``), read from the end; b"" when unreadable."""
    out = b""
    for part in (path, rotated(path)):
        try:
            with part.open("rb") as f:
                end = os.fstat(f.fileno()).st_size
                f.seek(max(0, end - (size - len(out))))
                out = f.read(size - len(out)) + out
        except OSError:
            if part == path:
                return b""
            break
        if len(out) >= size:
            break
    return out
