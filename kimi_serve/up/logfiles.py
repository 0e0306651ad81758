"""`up`'s log files (``STATE_ROOT/logs/up-PROFILE-YYYYmmdd-HHMMSS.log``): where they go, how many are kept
(``KEEP_LOGS`` per profile, with their rotated ``.1``), and how `kimi-serve logs` reads them (from the end, following
across a rotation: :mod:`kimi_serve.process.server_log` caps and rotates them).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TextIO

from kimi_serve.process import server_log

KEEP_LOGS = 10


def log_dir() -> Path:
    from kimi_serve.core.settings import state_root

    return state_root() / "logs"


def default_log_file(profile_name: str) -> Path:
    return log_dir() / f"up-{profile_name}-{datetime.now():%Y%m%d-%H%M%S}.log"


def up_logs(profile_name: str, folder: Path | None = None) -> list[Path]:
    """The profile's `up` logs, oldest first (the names sort by time)."""
    d = folder or log_dir()
    stamp = "[0-9]" * 8 + "-" + "[0-9]" * 6
    return sorted(d.glob(f"up-{profile_name}-{stamp}*.log")) if d.is_dir() else []


def prune(profile_name: str, keep: int = KEEP_LOGS, folder: Path | None = None) -> list[Path]:
    """Delete all but the newest ``keep - 1`` logs of the profile (room for the one about to be written), each with
    its rotated ``.1``; return the logs deleted."""
    old = up_logs(profile_name, folder)
    doomed = old[: max(0, len(old) - (keep - 1))]
    for p in doomed:
        for path in (p, server_log.rotated(p)):
            try:
                path.unlink()
            except OSError:
                continue
    return doomed


def tail(path: Path, lines: int, out: TextIO) -> server_log.Position:
    """Write the last ``lines`` lines of the log ``path`` (its ``.1``, then itself) to ``out``, read from the end;
    return where :func:`follow` goes on from."""
    return server_log.write_tail(path, lines, out)


def follow(
    path: Path,
    out: TextIO,
    *,
    start: server_log.Position | None = None,
    stop: Callable[[], bool] = lambda: False,
    poll_s: float = 0.5,
) -> None:
    """Write what is appended to ``path`` (from ``start``, default its end) as it comes, like ``tail -F``, until
    ``stop()`` or Ctrl-C."""
    server_log.follow(path, out, start=start, stop=stop, poll_s=poll_s)
