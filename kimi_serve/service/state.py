"""Where the service's files live under a root, and the records kept between runs.

Under ``ROOT`` (``/`` on a real host, a temporary tree in tests):
- ``etc/systemd/system/NAME.service``: the unit;
- ``var/lib/kimi-serve/service/NAME/``: ``previous.service`` (the unit before the last change),
  ``last-good.service`` + ``last-good.json`` (written only after a passing verify), ``last-verify.json``.
Every write is atomic (temporary file in the same directory, fsync, rename).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimi_serve.core import files
from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.inputs import load_json

UNIT_DIR = "etc/systemd/system"  # where systemd reads units from, under a root: the one home of this path
STATE_DIR = "var/lib/kimi-serve/service"


@dataclass(frozen=True)
class ServicePaths:
    root: Path
    unit: str  # NAME.service

    def under_root(self, absolute: str) -> Path:
        """An absolute host path (e.g. a profile's api_key_file) inside this root."""
        return self.root / absolute.lstrip("/")

    @property
    def unit_file(self) -> Path:
        return self.unit_path(self.unit)

    def unit_path(self, name: str) -> Path:
        """A unit file (this service's or one beside it: the verify timer's, the alert's) in this root."""
        return self.root / UNIT_DIR / name

    @property
    def state_dir(self) -> Path:
        stem = self.unit.removesuffix(".service")
        if stem in ("", ".", "..") or "/" in stem or "\0" in stem:  # the unit names' rule (unit_file_name), again
            raise KimiServeError(f"invalid unit name {self.unit!r}", hint="use letters, digits and :_.- only")
        return self.root / STATE_DIR / stem

    def refuse_escape(self, *paths: Path) -> None:
        """Exit 5 naming the path when writing or removing any of ``paths`` (inside this root) would follow a
        symbolic link out of it (:func:`kimi_serve.core.files.escape_problem`)."""
        for path in paths:
            files.refuse_escape(self.root, path, "remove the link, or pass a --root whose links stay inside it")

    @property
    def previous_unit(self) -> Path:
        return self.state_dir / "previous.service"

    @property
    def last_good_unit(self) -> Path:
        return self.state_dir / "last-good.service"

    @property
    def last_good_record(self) -> Path:
        return self.state_dir / "last-good.json"

    @property
    def last_verify_record(self) -> Path:
        return self.state_dir / "last-verify.json"


def write_atomic(paths: ServicePaths, path: Path, text: str, mode: int = 0o644) -> None:
    """Replace ``path`` (inside ``paths.root``) with ``text`` in one rename, the service's fault checkpoint before it;
    its folder reached from the root without following a link out of it at any component, checked at this write
    (:func:`kimi_serve.core.files.write_under`)."""
    files.write_atomic(path, text, mode, step="service.write-atomic", root=paths.root)


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def read_record(path: Path) -> dict[str, Any] | None:
    text = read_text(path)
    if text is None:
        return None
    try:
        data = load_json(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def write_record(paths: ServicePaths, path: Path, data: dict[str, Any]) -> None:
    write_atomic(paths, path, json.dumps({**data, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, indent=2) + "\n")
