"""Snapshots of an injected root for the kill-at-every-checkpoint tests: every file and symlink with its mode and
bytes, so "rolled back" and "ended where an uninterrupted run ends" are compared byte for byte."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

MAX_CHECKPOINTS = 200  # a loop over kill points that reaches this has lost its end

# shadow-utils' own backups (useradd/userdel write NAME- beside each file they change): not kimi-serve's to restore
_BACKUPS = {"etc/passwd-", "etc/group-", "etc/shadow-", "etc/gshadow-"}


def files_of(root: Path) -> dict[str, tuple[int, bytes | str]]:
    """Every file and symlink under ``root``: mode and bytes (or the link target). Folders are not compared."""
    out: dict[str, tuple[int, bytes | str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if str(p.relative_to(root)) in _BACKUPS:
                continue
            if p.is_symlink():
                out[str(p.relative_to(root))] = (0, os.readlink(p))
            elif p.is_file():
                out[str(p.relative_to(root))] = (p.stat().st_mode, _stable(p.read_bytes()))
    return out


def _stable(data: bytes) -> bytes:
    """A created key file's admin key is random by design: compare that it is there and distinct, not its value."""
    m = re.search(rb"^admin-api-key: (\S+)$", data, re.M)
    if m is None:
        return data
    assert re.search(rb"^api-key: (\S+)$", data, re.M) and m.group(1) not in re.findall(
        rb"^api-key: (\S+)$", data, re.M
    )
    return data.replace(m.group(1), b"<random admin key>")


def normalized(files: dict[str, tuple[int, bytes | str]]) -> dict[str, tuple[int, bytes | str]]:
    """Records carry the time they were written: drop it, compare the rest byte for byte."""
    out = {}
    for rel, (mode, data) in files.items():
        if rel.endswith(".json") and isinstance(data, bytes):
            record = json.loads(data)
            record.pop("time", None)
            data = json.dumps(record, sort_keys=True).encode()
        out[rel] = (mode, data)
    return out


Run = subprocess.CompletedProcess[str]


def every_kill_point(run: Callable[[int, str], Run], after_kill: Callable[[int, Run], None]) -> tuple[int, Run]:
    """Run one command SIGKILLed at each of its checkpoints in turn (kimi_serve/core/faults.py): ``run(n, hook)``
    starts it with ``hook`` (``kill-at=N``) in its environment, ``after_kill(n, result)`` checks what a kill at N
    left. Ends at the first N the command got past (past its last checkpoint); returns (the kills, that run)."""
    for n in range(1, MAX_CHECKPOINTS):
        done = run(n, f"kill-at={n}")
        if done.returncode != -signal.SIGKILL:
            return n - 1, done
        after_kill(n, done)
    raise AssertionError(f"still killed at checkpoint {MAX_CHECKPOINTS}: the loop has lost its end")
