"""The host lock: one kimi-serve command that changes the host (patches, engine, unit, `up`) at a time.

An ``fcntl.flock`` on ``STATE_ROOT/host.lock``, taken *before* the command reads the state it will change, so two
runs started together cannot both pass their checks. The kernel drops the lock when its holder dies (SIGKILL, power
loss), so a crash never leaves it stale. The holder writes ``{"command", "pid", "since"}`` into the file; a second run
names it in its one-line error (exit 75) or, with ``wait``, waits for it. Re-entrant within one process (restart runs
install's steps under the lock it already holds).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.settings import STATE_DIR_ENV, state_root

LOCK_NAME = "host.lock"
_held: dict[Path, int] = {}  # lock path -> depth, for re-entry in this process


def lock_path(state_dir: Path | None = None) -> Path:
    return state_root(state_dir) / LOCK_NAME


def holder(path: Path) -> dict[str, Any] | None:
    """Who holds (or last held) the lock, as its holder wrote it; None when unknown."""
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "null")
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _describe(info: dict[str, Any] | None) -> str:
    if not info:
        return "another kimi-serve command"
    return f"`kimi-serve {info.get('command', '?')}` (pid {info.get('pid', '?')}, since {info.get('since', '?')})"


@contextlib.contextmanager
def host_lock(
    command: str, *, state_dir: Path | None = None, wait: bool = False, wait_timeout: float | None = None
) -> Iterator[Path]:
    """Hold the host lock for ``command`` (e.g. ``"patches apply"``). Raises exit 75 when it is held and ``wait`` is
    false (or ``wait_timeout`` passes), exit 5 when the state root cannot be written."""
    path = lock_path(state_dir)
    if path in _held:
        _held[path] += 1
        try:
            yield path
        finally:
            _held[path] -= 1
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f: IO[str] = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held for the block
    except OSError as exc:
        raise KimiServeError(
            f"cannot write the host lock {path}: {exc.strerror or exc}",
            hint=f"run as root, or set {STATE_DIR_ENV} to a writable directory",
            exit_code=ExitCode.ENVIRONMENT,
        ) from None
    with f:
        deadline = None if wait_timeout is None else time.monotonic() + wait_timeout
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not wait or (deadline is not None and time.monotonic() > deadline):
                    info = holder(path)
                    for _ in range(20):  # the holder writes its name just after taking the lock
                        if info:
                            break
                        time.sleep(0.05)
                        info = holder(path)
                    raise KimiServeError(
                        f"{_describe(info)} is changing this host",
                        where=str(path),
                        hint="wait for it to finish, or pass --wait-lock",
                        exit_code=ExitCode.LOCKED,
                    ) from None
                time.sleep(0.2)
        f.seek(0)
        f.truncate()
        f.write(
            json.dumps(
                {"command": command, "pid": os.getpid(), "since": datetime.now(UTC).isoformat(timespec="seconds")}
            )
        )
        f.flush()
        _held[path] = 1
        try:
            yield path
        finally:
            del _held[path]
            f.seek(0)
            f.truncate()
            fcntl.flock(f, fcntl.LOCK_UN)
