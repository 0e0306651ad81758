"""The intent journal of a patch change: what a run of `patches apply`/`revert` is about to do to the install,
written before the first file is swapped, removed once the change is complete (the primitive, how a journal is
written, read and removed: :mod:`kimi_serve.core.journal`).

A run killed at any step (SIGKILL, power loss) leaves the journal behind. The next `patches status` reports the
interrupted change; the next `apply` or `revert` first recovers, under the site-packages lock:

- an apply whose every file is patched and whose record was committed is *finished* (the journal is dropped);
- anything else is *rolled back* (an apply) or *finished* (a revert) the same way: every file that is not the
  original is restored from the backups, which were written and fsync'd before the journal and are checked against
  the manifest's "before" hashes; then every file is checked again and the backups are removed.

Either way the install ends byte for byte as the manifest's originals (or, for the finished apply, its patched
state), and stray temporary files of the swap (and of a journal write killed before its rename) are removed.
"""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kimi_serve.core.faults import checkpoint
from kimi_serve.core.inputs import read_json
from kimi_serve.core.journal import UNREADABLE, Journal, interrupted
from kimi_serve.patches.files import Content, invalidate_bytecode, read_content, replace_all, sha256_file
from kimi_serve.patches.manifest import PatchSet, reinstall_error


def intent_path(record_dir: Path) -> Path:
    return record_dir.parent / f"{record_dir.name}.intent.json"


def _journal(record_dir: Path) -> Journal:
    """The change's journal (:class:`kimi_serve.core.journal.Journal`), beside its record folder."""
    return Journal(intent_path(record_dir), mode=0o644)


def begin(record_dir: Path, op: str, ps: PatchSet, site_packages: Path) -> None:
    _journal(record_dir).write(
        {
            "op": op,
            "set": ps.name,
            "site_packages": str(site_packages),
            "pid": os.getpid(),
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "files": {f.path: {"before": f.before, "after": f.after} for f in ps.files},
        },
    )
    checkpoint(f"patches.{op}.journal-written")


def end(record_dir: Path) -> None:
    _journal(record_dir).remove()


def read_intent(record_dir: Path) -> dict[str, Any] | None:
    try:
        return _journal(record_dir).read()
    except OSError:  # it cannot be read: recovered like one that is not JSON
        return dict(UNREADABLE)


def describe(intent: dict[str, Any]) -> str:
    return f"{interrupted(intent, 'patches')}: the next `patches apply` or `patches revert` finishes or rolls it back"


def originals_from_backup(ps: PatchSet, backup: Path) -> dict[str, Content] | None:
    """The backed-up originals, when every one is there and hashes to the manifest's 'before'."""
    out = {}
    for f in ps.files:
        path = backup / f.path
        if sha256_file(path) != f.before:
            return None
        out[f.path] = read_content(path)
    return out


def remove_stray_temps(site_packages: Path, ps: PatchSet) -> None:
    for f in ps.files:
        target = site_packages / f.path
        for tmp in target.parent.glob(f".{target.name}.*.kimi-serve.tmp"):
            tmp.unlink(missing_ok=True)


def verify_originals(site_packages: Path, ps: PatchSet, what: str) -> None:
    """Every file must hash to the manifest's 'before' now; else exit 1 naming the first that does not."""
    for f in ps.files:
        found = sha256_file(site_packages / f.path)
        if found != f.before:
            raise reinstall_error(
                ps,
                f"{what}: {f.path} hashes to {str(found)[:12]}, not the original's {f.before[:12]} from the manifest",
            )


def recover(site_packages: Path, ps: PatchSet, record_dir: Path) -> str | None:
    """Finish or roll back an interrupted change (see the module doc); None when there was none."""
    _journal(record_dir).sweep()
    intent = read_intent(record_dir)
    if intent is None:
        return None
    op = str(intent.get("op", "unknown"))
    remove_stray_temps(site_packages, ps)
    now = {f.path: sha256_file(site_packages / f.path) for f in ps.files}
    try:  # the apply committed its record when it is there and reads as JSON
        read_json(record_dir / "record.json")
        record_ok = True
    except (OSError, ValueError):
        record_ok = False
    if op == "apply" and record_ok and all(now[f.path] == f.after for f in ps.files):
        end(record_dir)
        return "finished an interrupted `patches apply` (every file was patched and recorded)"
    if any(now[f.path] != f.before for f in ps.files):
        originals = originals_from_backup(ps, record_dir / "backup")
        if originals is None:
            raise reinstall_error(
                ps,
                f"an interrupted `patches {op}` cannot be recovered: the backups in {record_dir / 'backup'} are "
                "missing or do not match the manifest's 'before' hashes",
                ", then run `patches revert` to clear the journal",
            )
        checkpoint("patches.recover.restore")
        before = {f.path: f.before for f in ps.files}
        replace_all(site_packages, {rel: content for rel, content in originals.items() if now[rel] != before[rel]})
    for f in ps.files:
        invalidate_bytecode(site_packages / f.path)
    verify_originals(site_packages, ps, f"recovering an interrupted `patches {op}`")
    checkpoint("patches.recover.restored")
    shutil.rmtree(record_dir, ignore_errors=True)
    end(record_dir)
    verb = "rolled back" if op == "apply" else "finished"
    return f"{verb} an interrupted `patches {op}`: every file is the original again"
