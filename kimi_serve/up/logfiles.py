"""`up`'s log files: where they go, how many are kept, and how `kimi-serve logs` reads them.

Each `up` writes ``STATE_ROOT/logs/up-PROFILE-YYYYmmdd-HHMMSS.log``; before a start, all but the newest
``KEEP_LOGS - 1`` of that profile are deleted, so a profile never has more than ``KEEP_LOGS`` files.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TextIO

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
    """Delete all but the newest ``keep - 1`` logs of the profile (room for the one about to be written); return
    what was deleted."""
    old = up_logs(profile_name, folder)
    doomed = old[: max(0, len(old) - (keep - 1))]
    for p in doomed:
        try:
            p.unlink()
        except OSError:
            continue
    return doomed


def tail(path: Path, lines: int) -> list[str]:
    with path.open(encoding="utf-8", errors="replace") as f:
        return [line.rstrip("\n") for line in f.readlines()[-lines:]] if lines > 0 else []


def follow(path: Path, out: TextIO, *, stop: Callable[[], bool] = lambda: False, poll_s: float = 0.5) -> None:
    """Write what is appended to ``path`` as it comes (like tail -f) until ``stop()`` or Ctrl-C."""
    for chunk in _appended(path, stop, poll_s):
        out.write(chunk)
        out.flush()


def _appended(path: Path, stop: Callable[[], bool], poll_s: float) -> Iterator[str]:
    with path.open(encoding="utf-8", errors="replace") as f:
        f.seek(0, 2)
        while not stop():
            chunk = f.read()
            if chunk:
                yield chunk
            else:
                time.sleep(poll_s)
