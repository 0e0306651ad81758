"""`up`'s log files: where they go, how many are kept, how large they grow, and how `kimi-serve logs` reads them.

Each `up` writes ``STATE_ROOT/logs/up-PROFILE-YYYYmmdd-HHMMSS.log`` (a replicated profile one per replica and one for
the router beside it); before a start, all but the newest ``KEEP_LOGS - 1`` of that profile are deleted (with their
rotated ``.1``), so a profile never has more than ``KEEP_LOGS`` files. Each file is capped at
:data:`kimi_serve.process.server_log.LOG_MAX_BYTES`: past it, it is rotated to ``FILE.1`` (the previous ``.1`` is
dropped) and a new ``FILE`` starts, so one server's log takes at most twice the cap. ``logs`` reads from the end
(memory independent of the file's size) across ``FILE.1`` and ``FILE``, and follows across a rotation.
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


def default_log_file(profile_name: str, folder: Path | None = None) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return (folder or log_dir()) / f"up-{profile_name}-{stamp}.log"


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
