"""Apply and revert a patch set, all-or-nothing. Apply refuses unless every file is original, runs the patches on a
staging copy that must hash to the manifest's "after", keeps the originals as backups with a record, then swaps every
file in (undone on failure); revert puts the backups (without a record: the reverse patches) back and checks the
manifest's "before" hashes. An intent journal recovers a killed change (kimi_serve.patches.journal); one change at a
time under the lock of the site-packages it changes (:func:`site_lock`, kimi_serve.core.lock): the lock of the venv,
not of the host, so a change of another venv never waits for it."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from kimi_serve import __version__
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.faults import checkpoint
from kimi_serve.core.files import fsync_dir
from kimi_serve.core.journal import write_json
from kimi_serve.core.lock import directory_lock
from kimi_serve.core.settings import STATE_DIR_ENV
from kimi_serve.patches import journal
from kimi_serve.patches.files import Content, read_content, replace_all
from kimi_serve.patches.manifest import PatchSet, reinstall_error
from kimi_serve.patches.state import (
    PatchStatus,
    State,
    check_hashes,
    not_writable,
    permitted,
    record_dir_of,
    stage_set,
    status,
    write_backups,
)


@contextlib.contextmanager
def site_lock(site_packages: Path, *, wait: bool) -> Iterator[Path]:
    """The lock of what a patch change changes: a flock on the (real) site-packages folder itself, so two runs on one
    SGLang serialise whatever their ``--state-dir``, and one under a server `up` runs from it (a shared hold) is
    refused; nothing is written there. Exit 5 (not 70) when the folder cannot be opened."""
    real = Path(os.path.realpath(site_packages))
    with directory_lock(
        real,
        wait=wait,
        doing=f"is changing the SGLang in {real}",
        doing_shared=f"serves from the SGLang in {real}",
    ) as held:
        yield held


# ---------------------------------------------------------------------------------------------------------- apply


@dataclass
class ChangeResult:
    changed: bool
    status: PatchStatus
    message: str


def apply(
    site_packages: Path, patch_set: PatchSet, *, state_dir: Path | None = None, wait_lock: bool = False
) -> ChangeResult:
    """Apply every patch of ``patch_set`` or none; a no-op when already applied. Takes the site-packages lock
    first, then recovers an interrupted change (:mod:`kimi_serve.patches.journal`), then reads the state."""
    return _change(_apply, site_packages, patch_set, state_dir, wait_lock)


def _change(
    change: Callable[[Path, PatchSet, Path | None, Path], ChangeResult],
    site_packages: Path,
    patch_set: PatchSet,
    state_dir: Path | None,
    wait_lock: bool,
) -> ChangeResult:
    with site_lock(site_packages, wait=wait_lock), permitted(site_packages):
        record_dir = record_dir_of(state_dir, patch_set, site_packages)
        recovered = journal.recover(site_packages, patch_set, record_dir)
        result = change(site_packages, patch_set, state_dir, record_dir)
    if recovered:
        result.message = f"{result.status.set_name}: {recovered}\n{result.message}"
        result.changed = True
    return result


def _backup_error(record_dir: Path, exc: OSError) -> KimiServeError:
    return KimiServeError(
        f"cannot write backups to {record_dir}: {exc.strerror or exc}; nothing was changed",
        hint=f"free space there, or pass --state-dir DIR (or set {STATE_DIR_ENV})",
        exit_code=ExitCode.ENVIRONMENT,
    )


def apply_sets(
    site_packages: Path, patch_sets: Sequence[PatchSet], *, state_dir: Path | None = None, wait_lock: bool = False
) -> list[ChangeResult]:
    """Apply several sets (a profile's ``patch_set`` list) all-or-nothing across them: each through :func:`apply`
    (all-or-nothing within the set, journalled); when one fails, the sets this call applied before it are reverted
    (:func:`revert`, newest first) and the failure is raised, so the install is as it was."""
    done: list[ChangeResult] = []
    for i, ps in enumerate(patch_sets):
        try:
            done.append(apply(site_packages, ps, state_dir=state_dir, wait_lock=wait_lock))
        except BaseException:
            for earlier, result in reversed(list(zip(patch_sets[:i], done, strict=True))):
                if result.changed:
                    revert(site_packages, earlier, state_dir=state_dir, wait_lock=True)
            raise
    return done


def revert_sets(
    site_packages: Path, patch_sets: Sequence[PatchSet], *, state_dir: Path | None = None, wait_lock: bool = False
) -> list[ChangeResult]:
    """Revert several sets (a profile's ``patch_set`` list), newest first, each through :func:`revert`; the results
    in the sets' own order."""
    done = [revert(site_packages, ps, state_dir=state_dir, wait_lock=wait_lock) for ps in reversed(patch_sets)]
    return done[::-1]


def _apply(site_packages: Path, patch_set: PatchSet, state_dir: Path | None, record_dir: Path) -> ChangeResult:
    before = status(site_packages, patch_set, state_dir=state_dir)
    if before.all_applied:
        return ChangeResult(False, before, f"{patch_set.name}: already applied, nothing to do")
    if not before.pristine:
        bad = next(f for f in before.files if f.position != 0)
        raise KimiServeError(
            f"{bad.path} is {bad.label}, not the original sglang {patch_set.target_version} file; nothing was changed",
            where=patch_set.name,
            hint=f"reinstall it (pip install --force-reinstall --no-deps "
            f"sglang=={patch_set.target_version}), then apply",
            exit_code=ExitCode.FAILED,
        )
    originals = {f.path: read_content(site_packages / f.path) for f in patch_set.files}
    staged = stage_set(patch_set, {rel: c.data for rel, c in originals.items()}, patch_set.patches)
    check_hashes(patch_set, staged, "after")

    record = record_dir / "record.json"
    pending = record.with_name(".record.json.tmp")
    checkpoint("patches.apply.start")
    shutil.rmtree(record_dir, ignore_errors=True)
    try:  # backups and the record first: nothing in the install changes unless both could be written
        write_backups(record_dir / "backup", originals)
        write_json(
            pending,
            {
                "set": patch_set.name,
                "applied_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "kimi_serve_version": __version__,
                "sglang_version": before.sglang_version,
                "site_packages": str(site_packages),
                "patches": [p.name for p in patch_set.patches],
                "features": sorted(patch_set.features),
                "files": {
                    f.path: {"before": f.before, "after": f.after, "mode": oct(originals[f.path].mode)}
                    for f in patch_set.files
                },
                "backup_dir": str(record_dir / "backup"),
            },
        )
        checkpoint("patches.apply.backed-up")
        journal.begin(record_dir, "apply", patch_set, site_packages)
    except OSError as exc:
        shutil.rmtree(record_dir, ignore_errors=True)
        journal.end(record_dir)
        raise _backup_error(record_dir, exc) from exc
    try:
        replace_all(site_packages, {rel: Content(staged[rel], c.mode) for rel, c in originals.items()})
    except OSError as exc:
        shutil.rmtree(record_dir, ignore_errors=True)
        journal.end(record_dir)
        raise not_writable(site_packages, exc) from exc
    checkpoint("patches.apply.swapped")
    os.replace(pending, record)
    fsync_dir(record_dir)
    checkpoint("patches.apply.recorded")
    journal.end(record_dir)
    after = status(site_packages, patch_set, state_dir=state_dir)
    return ChangeResult(
        True,
        after,
        f"{patch_set.name}: applied {len(patch_set.patches)} patches to "
        f"{len(patch_set.files)} files in {site_packages}",
    )


# --------------------------------------------------------------------------------------------------------- revert


def revert(
    site_packages: Path, patch_set: PatchSet, *, state_dir: Path | None = None, wait_lock: bool = False
) -> ChangeResult:
    """Restore the original files byte for byte, checked against the manifest's "before" hashes afterwards (exit 1
    on a mismatch); a no-op when nothing is patched. Site lock and recovery as in :func:`apply`."""
    return _change(_revert, site_packages, patch_set, state_dir, wait_lock)


def _revert(site_packages: Path, patch_set: PatchSet, state_dir: Path | None, record_dir: Path) -> ChangeResult:
    before = status(site_packages, patch_set, state_dir=state_dir)
    if before.pristine:
        shutil.rmtree(record_dir, ignore_errors=True)
        return ChangeResult(False, before, f"{patch_set.name}: not applied, nothing to revert")
    unknown = [f for f in before.files if f.position not in (0, f.chain_length - 1)]
    if unknown:
        bad = unknown[0]
        raise reinstall_error(
            patch_set,
            f"{bad.path} is {bad.label}; reverting would discard changes kimi-serve did not make, nothing was changed",
            " to get the originals",
        )
    originals = journal.originals_from_backup(patch_set, record_dir / "backup")
    source = "backups"
    if originals is None:  # no record (patched elsewhere) or damaged backups: undo the patches instead
        source = "reverse patches"
        if before.conflicts:
            raise reinstall_error(
                patch_set,
                f"{before.conflicts[0].name} is only partly applied and there is no backup; nothing was changed",
            )
        applied = tuple(p for p, r in zip(patch_set.patches, before.patches, strict=True) if r.state is State.APPLIED)
        current = {f.path: read_content(site_packages / f.path) for f in patch_set.files}
        restored = stage_set(patch_set, {rel: c.data for rel, c in current.items()}, applied, reverse=True)
        check_hashes(patch_set, restored, "before")
        originals = {rel: Content(restored[rel], current[rel].mode) for rel in restored}
        shutil.rmtree(record_dir, ignore_errors=True)
        try:  # a crash from here on is recovered from these, like any other
            write_backups(record_dir / "backup", originals)
        except OSError as exc:
            shutil.rmtree(record_dir, ignore_errors=True)
            raise _backup_error(record_dir, exc) from exc
    checkpoint("patches.revert.start")
    journal.begin(record_dir, "revert", patch_set, site_packages)
    changed = {f.path: originals[f.path] for f in before.files if f.position != 0}
    try:
        replace_all(site_packages, changed)
    except OSError as exc:
        raise not_writable(site_packages, exc) from exc
    checkpoint("patches.revert.swapped")
    journal.verify_originals(site_packages, patch_set, "patches revert")
    shutil.rmtree(record_dir, ignore_errors=True)
    checkpoint("patches.revert.cleaned")
    journal.end(record_dir)
    after = status(site_packages, patch_set, state_dir=state_dir)
    return ChangeResult(
        True,
        after,
        f"{patch_set.name}: restored {len(changed)} original files from {source} "
        "(each checked against the manifest's 'before' hash)",
    )
