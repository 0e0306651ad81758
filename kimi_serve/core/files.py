"""The one atomic file writer: a temporary file beside the target, its mode set before the first byte, fsync, one
rename. A reader (or a process killed at any point) sees the old file or the new one, never half of one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from kimi_serve.core.faults import checkpoint


def write_atomic(path: Path, text: str, mode: int = 0o644, step: str | None = None) -> None:
    """Replace ``path`` with ``text`` (mode ``mode`` from the start); ``step`` names a fault checkpoint before the
    rename (the kill-at-every-step tests reach it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if step:
            checkpoint(step)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
