"""The one transaction primitive: an intent journal, written before a change of the host, removed when it is done,
left behind by a kill for the next run to finish or roll the change back. What it records and how a change is
finished or rolled back is its owner's (:mod:`kimi_serve.service.journal`, :mod:`kimi_serve.patches.journal`); how
it is written (:func:`write_json`: atomic, inside ``root``), read, removed and swept is here, once.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimi_serve.core.files import fsync_dir, write_under
from kimi_serve.core.inputs import read_json

UNREADABLE: dict[str, Any] = {"op": "unknown", "unreadable": True}  # what a journal that is not a JSON object reads as


def write_json(
    path: Path, data: dict[str, Any], mode: int = 0o644, *, root: Path | None = None, step: str | None = None
) -> None:
    """Write ``data`` (indented JSON) to ``path`` durably: after a crash the file is the old one or the new one
    (:func:`kimi_serve.core.files.write_under` inside ``root``, default the file's own folder; ``step``: a fault
    checkpoint before the rename)."""
    text = json.dumps(data, indent=2) + "\n"
    write_under(path.parent if root is None else root, path, text, mode, step, tmp=f".{path.name}.{os.getpid()}.tmp")


@dataclass(frozen=True)
class Journal:
    """The intent journal at ``path``; its writes confined to ``root`` (default: its own folder)."""

    path: Path
    root: Path | None = None
    mode: int = 0o600

    def write(self, data: dict[str, Any], step: str | None = None) -> None:
        write_json(self.path, data, self.mode, root=self.root, step=step)

    def read(self) -> dict[str, Any] | None:
        """The journal, None when there is none, a copy of :data:`UNREADABLE` when it is not a (non-empty) JSON
        object; an OSError (it cannot be opened, it is not a regular file) is the caller's."""
        try:
            data = read_json(self.path)
        except FileNotFoundError:
            return None
        except ValueError:
            return dict(UNREADABLE)
        return data if isinstance(data, dict) and data else dict(UNREADABLE)

    def remove(self) -> None:
        """End the change: unlink the journal, fsync its folder."""
        self.path.unlink(missing_ok=True)
        with contextlib.suppress(FileNotFoundError):
            fsync_dir(self.path.parent)

    def sweep(self) -> None:
        """Remove the temporary files a killed write of the journal left (``.NAME.*.tmp``, and ``.NAME.tmp`` of
        earlier versions). Only under the lock of the change: no other write of it is under way."""
        if self.path.parent.is_dir():
            old = self.path.with_name(f".{self.path.name}.tmp")
            for tmp in (*self.path.parent.glob(f".{self.path.name}.*.tmp"), old):
                tmp.unlink(missing_ok=True)


def interrupted(intent: dict[str, Any], command: str) -> str:
    """The change a journal records, in words: "an interrupted `COMMAND OP` (pid N, started T)"."""
    return (
        f"an interrupted `{command} {intent.get('op', '?')}` (pid {intent.get('pid', '?')}, started "
        f"{intent.get('started_at', '?')})"
    )
