"""Apply and revert a patch set, all-or-nothing, with backups and a record (see kimi_serve.patches.manifest)."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from kimi_serve import __version__
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.settings import STATE_DIR_ENV
from kimi_serve.patches.files import (
    Content,
    read_content,
    replace_all,
    sha256_file,
)
from kimi_serve.patches.manifest import PatchSet
from kimi_serve.patches.state import (
    PatchStatus,
    State,
    check_hashes,
    locked,
    not_writable,
    record_dir_of,
    stage_set,
    status,
    write_backups,
)

# ---------------------------------------------------------------------------------------------------------- apply


@dataclass
class ChangeResult:
    changed: bool
    status: PatchStatus
    message: str


def apply(site_packages: Path, patch_set: PatchSet, *, state_dir: Path | None = None) -> ChangeResult:
    """Apply every patch of ``patch_set`` or none; a no-op when already applied."""
    before = status(site_packages, patch_set, state_dir=state_dir)
    if before.all_applied:
        return ChangeResult(False, before, f"{patch_set.name}: already applied, nothing to do")
    if not before.pristine:
        bad = next(f for f in before.files if f.position != 0)
        raise KimiServeError(f"{bad.path} is {bad.label}, not the original sglang {patch_set.target_version} file; "
                             "nothing was changed", where=patch_set.name,
                             hint=f"reinstall it (pip install --force-reinstall --no-deps "
                                  f"sglang=={patch_set.target_version}), then apply",
                             exit_code=ExitCode.FAILED)
    originals = {f.path: read_content(site_packages / f.path) for f in patch_set.files}
    staged = stage_set(patch_set, {rel: c.data for rel, c in originals.items()}, patch_set.patches)
    check_hashes(patch_set, staged, "after")

    record_dir = record_dir_of(state_dir, patch_set, site_packages)
    record = record_dir / "record.json"
    pending = record.with_name(".record.json.tmp")
    with locked(record_dir):
        shutil.rmtree(record_dir, ignore_errors=True)
        try:  # backups and the record first: nothing in the install changes unless both could be written
            write_backups(record_dir / "backup", originals)
            pending.write_text(json.dumps({
                "set": patch_set.name,
                "applied_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "kimi_serve_version": __version__,
                "sglang_version": before.sglang_version,
                "site_packages": str(site_packages),
                "patches": [p.name for p in patch_set.patches],
                "features": sorted(patch_set.features),
                "files": {f.path: {"before": f.before, "after": f.after, "mode": oct(originals[f.path].mode)}
                          for f in patch_set.files},
                "backup_dir": str(record_dir / "backup"),
            }, indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            shutil.rmtree(record_dir, ignore_errors=True)
            raise KimiServeError(f"cannot write backups to {record_dir}: {exc.strerror or exc}; nothing was changed",
                                 hint=f"free space there, or pass --state-dir DIR (or set {STATE_DIR_ENV})",
                                 exit_code=ExitCode.ENVIRONMENT) from exc
        try:
            replace_all(site_packages, {rel: Content(staged[rel], c.mode) for rel, c in originals.items()})
        except OSError as exc:
            shutil.rmtree(record_dir, ignore_errors=True)
            raise not_writable(site_packages, exc) from exc
        os.replace(pending, record)
    after = status(site_packages, patch_set, state_dir=state_dir)
    return ChangeResult(True, after, f"{patch_set.name}: applied {len(patch_set.patches)} patches to "
                                     f"{len(patch_set.files)} files in {site_packages}")


# --------------------------------------------------------------------------------------------------------- revert


def _originals_from_backup(ps: PatchSet, backup: Path) -> dict[str, Content] | None:
    """The backed-up originals, when every one is there and hashes to the manifest's 'before'."""
    out = {}
    for f in ps.files:
        path = backup / f.path
        if sha256_file(path) != f.before:
            return None
        out[f.path] = read_content(path)
    return out


def revert(site_packages: Path, patch_set: PatchSet, *, state_dir: Path | None = None) -> ChangeResult:
    """Restore the original files byte for byte; a no-op when nothing is patched."""
    before = status(site_packages, patch_set, state_dir=state_dir)
    record_dir = record_dir_of(state_dir, patch_set, site_packages)
    if before.pristine:
        if record_dir.exists():
            with locked(record_dir):
                shutil.rmtree(record_dir, ignore_errors=True)
        return ChangeResult(False, before, f"{patch_set.name}: not applied, nothing to revert")
    unknown = [f for f in before.files if f.position not in (0, f.chain_length - 1)]
    if unknown:
        bad = unknown[0]
        raise KimiServeError(f"{bad.path} is {bad.label}; reverting would discard changes kimi-serve did not make, "
                             "nothing was changed", where=patch_set.name,
                             hint=f"reinstall sglang=={patch_set.target_version} (pip install --force-reinstall "
                                  "--no-deps) to get the originals", exit_code=ExitCode.FAILED)
    with locked(record_dir):
        originals = _originals_from_backup(patch_set, record_dir / "backup")
        source = "backups"
        if originals is None:  # no record (patched elsewhere) or damaged backups: undo the patches instead
            source = "reverse patches"
            if before.conflicts:
                raise KimiServeError(f"{before.conflicts[0].name} is only partly applied and there is no backup; "
                                     "nothing was changed", where=patch_set.name,
                                     hint=f"reinstall sglang=={patch_set.target_version} (pip install "
                                          "--force-reinstall --no-deps)", exit_code=ExitCode.FAILED)
            applied = tuple(p for p, r in zip(patch_set.patches, before.patches, strict=True)
                            if r.state is State.APPLIED)
            current = {f.path: read_content(site_packages / f.path) for f in patch_set.files}
            restored = stage_set(patch_set, {rel: c.data for rel, c in current.items()}, applied, reverse=True)
            check_hashes(patch_set, restored, "before")
            originals = {rel: Content(restored[rel], current[rel].mode) for rel in restored}
        changed = {f.path: originals[f.path] for f in before.files if f.position != 0}
        try:
            replace_all(site_packages, changed)
        except OSError as exc:
            raise not_writable(site_packages, exc) from exc
        shutil.rmtree(record_dir, ignore_errors=True)
    after = status(site_packages, patch_set, state_dir=state_dir)
    return ChangeResult(True, after, f"{patch_set.name}: restored {len(changed)} original files from {source}")


