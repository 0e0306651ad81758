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


def resolve_in(root: Path, path: str) -> str:
    """``path`` with its symlinks resolved as the system under ``root`` sees them (absolute links stay inside)."""
    parts, hops = [p for p in path.split("/") if p], 0
    done: list[str] = []
    while parts:
        part = parts.pop(0)
        if part in (".", ".."):
            done = done[:-1] if part == ".." else done
            continue
        here = root.joinpath(*done, part)
        if here.is_symlink() and hops < 40:
            hops += 1
            target = os.readlink(here)
            done = [] if target.startswith("/") else done
            parts = [p for p in target.split("/") if p] + parts
            continue
        done.append(part)
    return "/" + "/".join(done)
