"""Scratch copies of the real SGLang 0.5.23 sources for the patch tests, taken from the cached pinned wheel."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from kimi_serve.patches import PatchSet, cached_wheel, load_patch_set
from kimi_serve.patches.files import sha256_file

VERSION_FILES = ("sglang/__init__.py", "sglang/version.py", "sglang/_version.py")


def pinned_wheel(patch_set: PatchSet) -> Path:
    wheel = cached_wheel(patch_set.target_version)
    if wheel is None:
        pytest.skip(f"no cached sglang {patch_set.target_version} wheel: run scripts/fetch-sglang-wheel.sh (CI does)")
    return wheel


def extract(wheel: Path, dest: Path, *, whole_package: bool, extra: tuple[str, ...] = ()) -> Path:
    """Unpack into ``dest`` (a stand-in site-packages): all of sglang/, or just what the patch set touches plus the
    version files, the dist-info, and ``extra``."""
    touched = {f.path for f in load_patch_set("sglang-0.5.23-sm120").files}
    with zipfile.ZipFile(wheel) as zf:
        names = [
            n
            for n in zf.namelist()
            if (n.startswith("sglang/") and whole_package)
            or n in touched
            or n in VERSION_FILES
            or n in extra
            or n.startswith("sglang-")
            and ".dist-info/" in n
        ]
        zf.extractall(dest, names)
    return dest


def snapshot(root: Path) -> dict[str, tuple[str | None, int]]:
    """sha256 and permission bits of every file under ``root``."""
    return {
        str(p.relative_to(root)): (sha256_file(p), p.stat().st_mode & 0o7777)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
