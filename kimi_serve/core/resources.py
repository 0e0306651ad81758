"""Files shipped with kimi-serve (profiles, the systemd template, the SM120 patch sets).

In a checkout they are the top-level configs/, systemd/ and patches/ folders; kimi_serve/_data/ links to them, and the
wheel carries copies (package data), so an installed kimi-serve finds them without a checkout.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent  # kimi_serve/
_DATA = _PACKAGE / "_data"


def resource_dir(kind: str) -> Path:
    """The shipped folder ``kind``: ``configs``, ``systemd`` or ``patches``."""
    if kind not in {"configs", "systemd", "patches"}:
        raise ValueError(f"unknown resource kind {kind!r}")
    return _DATA / kind


def simulator_data(name: str) -> Path:
    """A data file of the scripted model (``kimi_serve/simulator/data/``: its vocabulary, e.g. ``tasks.json``)."""
    return _PACKAGE / "simulator" / "data" / name


def package_root() -> Path:
    """The folder holding the ``kimi_serve`` package; put it on PYTHONPATH for a subprocess (e.g. the SGLang venv)."""
    return _PACKAGE.parent
