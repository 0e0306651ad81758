"""The output folder of `capture`: ``records.jsonl`` (the training data), ``rejects.jsonl`` (what failed, and why).

Resumable: ``records.jsonl`` is append-only, one whole line per record written with one ``write`` and fsync'd before
the next; the done-index is rebuilt from the file at each start. A line without its newline (the process was killed
or the disk filled during the write) is cut off, so the file holds whole records only, each id once; a write that
fails is cut back to where it began. ``rejects.jsonl`` holds the latest failure of each id without a record; a run
retries the rejects it selects and rewrites the file (atomically) without them first.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from pathlib import Path
from typing import Any

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.faults import checkpoint
from kimi_serve.core.files import fsync_dir, write_atomic

RECORDS, REJECTS = "records.jsonl", "rejects.jsonl"


def _broken(path: Path, line: int, what: str) -> KimiServeError:
    return KimiServeError(
        f"{path}:{line}: {what}",
        where=str(path),
        hint="this file was changed by hand: restore it, or move it away and capture into a new --out",
        exit_code=ExitCode.USAGE,
    )


def _scan(path: Path, keep: bool) -> list[tuple[int, str, dict[str, Any] | None]]:
    """``(line, id, the row when keep)`` of each line of a JSONL file written by this module, after cutting off a torn
    last line (no newline, or not a JSON record: the write never finished); exit 2 for a bad line before the end."""
    rows: list[tuple[int, str, dict[str, Any] | None]] = []
    torn: int | None = None
    if not path.exists():
        return rows
    with open(path, "rb") as f:
        offset = 0
        for number, raw in enumerate(f, 1):
            if torn is not None:
                raise _broken(path, number - 1, "not a JSON record line (and not the last line)")
            row = _row(raw) if raw.endswith(b"\n") else None
            if row is None:
                torn = offset
            else:
                rows.append((number, row["id"], row if keep else None))
            offset += len(raw)
    if torn is not None:
        truncate(path, torn)
    return rows


def _row(raw: bytes) -> dict[str, Any] | None:
    try:
        row = json.loads(raw)
    except ValueError:
        return None
    return row if isinstance(row, dict) and isinstance(row.get("id"), str) else None


def done_ids(path: Path) -> set[str]:
    """The ids recorded in ``path`` (records.jsonl); exit 2 for an id recorded twice (not this module's writing)."""
    ids: set[str] = set()
    for number, ident, _ in _scan(path, keep=False):
        if ident in ids:
            raise _broken(path, number, f"id {ident!r} is recorded twice")
        ids.add(ident)
    return ids


def truncate(path: Path, size: int) -> None:
    """Cut ``path`` to ``size`` bytes, durably (the torn end of a killed write)."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        _cut(fd, size)
    finally:
        os.close(fd)


def _cut(fd: int, size: int) -> None:
    os.ftruncate(fd, size)
    os.fsync(fd)


def load_rejects(path: Path) -> list[dict[str, Any]]:
    return [row for _, _, row in _scan(path, keep=True) if row is not None]


def keep_rejects(path: Path, rows: list[dict[str, Any]]) -> None:
    """Rewrite rejects.jsonl with ``rows`` only (atomically: the old file or the new one, never half)."""
    write_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


class Appender:
    """One JSONL file opened for appending whole lines, each fsync'd (one writer: the run's main thread)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        new = not path.exists()
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        if new:
            fsync_dir(path.parent)

    def append(self, row: dict[str, Any], step: str) -> None:
        """Write ``row`` as one line and fsync it; on failure cut the file back (never a partial line) and exit 5
        naming the file and the record."""
        data = (json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        start = os.fstat(self.fd).st_size
        checkpoint(step)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view) :]
            os.fsync(self.fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                _cut(self.fd, start)
            full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
            fix = "free space on its file system, then run the same command: it resumes" if full else "check the folder"
            raise KimiServeError(
                f"{self.path}: cannot write the record of {row.get('id')!r} ({exc.strerror or exc}); the file ends "
                "with the last whole record",
                where=str(self.path),
                hint=fix,
                exit_code=ExitCode.ENVIRONMENT,
            ) from None
        checkpoint(step + ".fsynced")

    def close(self) -> None:
        os.close(self.fd)


def prepare_out(out: Path) -> None:
    """The output folder, created when missing (exit 5 when it cannot be)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KimiServeError(
            f"cannot create {out}: {exc.strerror or exc}",
            where="--out",
            hint="pass a folder you can write",
            exit_code=ExitCode.ENVIRONMENT,
        ) from None
    if not out.is_dir():
        raise KimiServeError(f"{out} is not a folder", where="--out", hint="pass a folder", exit_code=ExitCode.USAGE)
