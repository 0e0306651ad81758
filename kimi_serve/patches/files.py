"""File mechanics for source patches: GNU patch on a staging copy, and an all-or-nothing swap into place.

Patches never run against the install itself. The files they touch are copied into a staging folder, each patch is
dry-run and then applied there with GNU ``patch`` (no fuzz, so context must match exactly), and only when every patch
went through are the results written into the install: each through a temp file in the target folder and
``os.replace``, keeping the file mode. If any replacement fails, the files already replaced are put back.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from kimi_serve.core import proc
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.faults import checkpoint
from kimi_serve.core.files import write_temp
from kimi_serve.core.settings import process_environ

_PATCH_TIMEOUT_S = 60


@dataclass(frozen=True)
class Content:
    """What a file should hold: its bytes, permission bits, and (optionally) its modification time."""

    data: bytes
    mode: int
    mtime_ns: int | None = None


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str | None:
    """The file's sha256, or None when it does not exist."""
    try:
        return sha256_bytes(path.read_bytes())
    except FileNotFoundError:
        return None


def patch_tool() -> str:
    """The GNU patch executable."""
    tool = shutil.which("patch")
    if tool is None:
        raise KimiServeError(
            "GNU patch is not installed", hint="install it (apt-get install patch)", exit_code=ExitCode.ENVIRONMENT
        )
    return tool


def run_patch(
    tool: str, patch_file: Path, directory: Path, *, strip: int, reverse: bool = False, dry_run: bool = False
) -> str | None:
    """Run GNU patch on ``directory``; None on success, else the tool's first line of complaint."""
    argv = [
        tool,
        f"-p{strip}",
        "--batch",
        "--forward",
        "--fuzz=0",
        "--no-backup-if-mismatch",
        "--reject-file=-",
        "--directory",
        str(directory),
        "--input",
        str(patch_file.resolve()),
    ]
    if reverse:
        argv.append("--reverse")
    if dry_run:
        argv.append("--dry-run")
    done = proc.run(
        argv,
        timeout=_PATCH_TIMEOUT_S,
        env={**process_environ(), "LC_ALL": "C"},
        install_hint="install GNU patch (apt-get install patch)",
    )
    if done.ok:
        return None
    lines = [ln.strip() for ln in (done.out + done.err).splitlines() if ln.strip()]
    complaints = [ln for ln in lines if not ln.startswith(("patching file", "checking file"))]
    return (complaints or lines or [f"patch exited {done.rc}"])[0]


def stage(files: dict[str, bytes], root: Path) -> None:
    """Write ``files`` (relative path -> bytes) under ``root``."""
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _write_temp(target: Path, content: Content) -> Path:
    return write_temp(target, content.data, content.mode, suffix=".kimi-serve.tmp", mtime_ns=content.mtime_ns)


def read_content(path: Path) -> Content:
    st = path.stat()
    return Content(path.read_bytes(), st.st_mode & 0o7777, st.st_mtime_ns)


def replace_all(root: Path, contents: dict[str, Content]) -> None:
    """Put every file in place or none: temp files first, then ``os.replace`` each; undo on any failure."""
    originals = {rel: read_content(root / rel) for rel in contents}
    temps: dict[str, Path] = {}
    replaced: list[str] = []
    try:
        for rel, content in contents.items():
            checkpoint("patches.swap.temp")
            temps[rel] = _write_temp(root / rel, content)
        for rel in contents:
            checkpoint("patches.swap.replace")
            os.replace(temps[rel], root / rel)
            del temps[rel]
            replaced.append(rel)
    except BaseException:
        for tmp in temps.values():
            tmp.unlink(missing_ok=True)
        for rel in reversed(replaced):
            os.replace(_write_temp(root / rel, originals[rel]), root / rel)
            invalidate_bytecode(root / rel)
        raise
    for rel in contents:
        checkpoint("patches.swap.bytecode")
        invalidate_bytecode(root / rel)


def invalidate_bytecode(source: Path) -> None:
    """Remove the cached bytecode of ``source``.

    Timestamp-checked .pyc files would notice the new size and mtime, but pip and distro packages may compile
    hash-based "unchecked" .pyc files that Python never revalidates, and a restored original can share size and
    mtime-second with a stale cache. Deleting them makes the next import compile what is on disk.
    """
    for pyc in (source.parent / "__pycache__").glob(f"{source.stem}.*.pyc"):
        pyc.unlink(missing_ok=True)
