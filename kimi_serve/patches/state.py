"""Patch state of an installed SGLang, read from hashes alone; the records and backups kept in the state dir;
staging a patch set on in-memory copies."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.files import create_new
from kimi_serve.core.inputs import read_json
from kimi_serve.core.report import json_meta
from kimi_serve.core.settings import state_root
from kimi_serve.patches.files import Content, patch_tool, run_patch, sha256_bytes, sha256_file, stage
from kimi_serve.patches.journal import intent_path
from kimi_serve.patches.manifest import Patch, PatchSet, reinstall_error
from kimi_serve.sglang.site import installed_version

# --------------------------------------------------------------------------------------------------------- status


class State(str, Enum):
    APPLIED = "applied"
    NOT_APPLIED = "not applied"
    CONFLICT = "conflict"


@dataclass(frozen=True)
class FileState:
    path: str
    sha256: str | None  # None: missing
    position: int | None  # index in the file's hash chain (0 = original, last = patched); None: modified/missing
    chain_length: int

    @property
    def label(self) -> str:
        if self.sha256 is None:
            return "missing"
        if self.position is None:
            return "modified"
        if self.position == 0:
            return "original"
        if self.position == self.chain_length - 1:
            return "patched"
        return f"partly patched ({self.position}/{self.chain_length - 1})"


@dataclass(frozen=True)
class PatchReport:
    name: str
    feature: str
    state: State
    detail: str = ""


@dataclass
class PatchStatus:
    JSON_PROPERTIES: ClassVar[tuple[Any, ...]] = (("applied", lambda s: s.all_applied),)

    set_name: str = field(metadata=json_meta(key="set"))
    target_version: str
    site_packages: Path
    sglang_version: str
    patches: list[PatchReport]
    files: list[FileState] = field(
        metadata=json_meta(encode=lambda fs: [{"path": f.path, "state": f.label, "sha256": f.sha256} for f in fs])
    )
    record: dict[str, Any] | None = None
    features: dict[str, bool] = field(default_factory=dict)  # feature -> all its patches applied
    interrupted: dict[str, Any] | None = None  # the journal of a change that was killed part-way (patches.journal)

    @property
    def all_applied(self) -> bool:
        return all(p.state is State.APPLIED for p in self.patches)

    @property
    def pristine(self) -> bool:
        return all(f.position == 0 for f in self.files)

    @property
    def conflicts(self) -> list[PatchReport]:
        return [p for p in self.patches if p.state is State.CONFLICT]


def _require_version(site_packages: Path, ps: PatchSet) -> str:
    found = installed_version(site_packages)
    if found != ps.target_version:
        raise KimiServeError(
            f"patch set {ps.name} is for sglang {ps.target_version}, found sglang {found} in {site_packages}",
            hint=f"install sglang=={ps.target_version} or use a patch set made for {found}",
            exit_code=ExitCode.ENVIRONMENT,
        )
    return found


def _file_states(site_packages: Path, ps: PatchSet) -> dict[str, FileState]:
    states = {}
    for f in ps.files:
        chain = ps.chain(f.path)
        digest = sha256_file(site_packages / f.path)
        position = chain.index(digest) if digest in chain else None
        states[f.path] = FileState(f.path, digest, position, len(chain))
    return states


def _patch_report(ps: PatchSet, patch: Patch, files: dict[str, FileState]) -> PatchReport:
    done, details = [], []
    for rel in patch.files:
        fs = files[rel]
        if fs.position is None:
            details.append(f"{rel} is {fs.label} (sha256 matches neither the original nor a patched state)")
            continue
        # 1-based step of this patch in the file's chain: applied when the file is at or past it.
        step = [p.name for p in ps.patches if rel in p.files].index(patch.name) + 1
        done.append(fs.position >= step)
    if details:
        return PatchReport(patch.name, patch.feature, State.CONFLICT, "; ".join(details))
    if all(done) or not any(done):
        return PatchReport(patch.name, patch.feature, State.APPLIED if all(done) else State.NOT_APPLIED)
    return PatchReport(patch.name, patch.feature, State.CONFLICT, "only some of its files patched")


@contextlib.contextmanager
def permitted(site_packages: Path) -> Iterator[None]:
    """A file of ``site_packages`` this user may not read or write is the host's refusal (exit 5), not a bug (70)."""
    try:
        yield
    except PermissionError as exc:
        raise KimiServeError(
            f"cannot read or write {exc.filename or site_packages}: {exc.strerror or exc}",
            where=str(site_packages),
            hint="run as the owner of that SGLang (or root), or fix its permissions",
            exit_code=ExitCode.ENVIRONMENT,
        ) from None


def status(site_packages: Path, patch_set: PatchSet, *, state_dir: Path | None = None) -> PatchStatus:
    """Per-patch state of ``patch_set`` in ``site_packages`` (refuses another sglang version)."""
    with permitted(site_packages):
        version = _require_version(site_packages, patch_set)
        files = _file_states(site_packages, patch_set)
        reports = [_patch_report(patch_set, patch, files) for patch in patch_set.patches]
        record_dir = record_dir_of(state_dir, patch_set, site_packages)
        record, intent = read_record(record_dir / "record.json"), read_record(intent_path(record_dir))
    features = {f: all(r.state is State.APPLIED for r in reports if r.feature == f) for f in patch_set.features}
    return PatchStatus(
        patch_set.name,
        patch_set.target_version,
        site_packages,
        version,
        reports,
        list(files.values()),
        record,
        features,
        intent,
    )


# ------------------------------------------------------------------------------------------------ state & records


def record_dir_of(state_dir: Path | None, ps: PatchSet, site_packages: Path) -> Path:
    key = sha256_bytes(str(site_packages.resolve()).encode())[:16]
    return state_root(state_dir) / "patches" / ps.name / key


def read_record(path: Path) -> dict[str, Any] | None:
    try:
        record: dict[str, Any] = read_json(path)
        return record
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return {"unreadable": f"{path}: {exc}"}


def write_backups(backup: Path, originals: dict[str, Content]) -> None:
    for rel, content in originals.items():
        target = backup / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        # fsync'd: a crash recovery may need them after a power loss; a link at the name is replaced, not followed
        with os.fdopen(create_new(target, 0o600), "wb") as f:
            f.write(content.data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(target, content.mode)
        if content.mtime_ns is not None:
            os.utime(target, ns=(content.mtime_ns, content.mtime_ns))


def not_writable(site_packages: Path, exc: OSError) -> KimiServeError:
    return KimiServeError(
        f"cannot write into {site_packages}: {exc.strerror or exc}",
        hint="run as root or as the owner of the SGLang venv",
        exit_code=ExitCode.ENVIRONMENT,
    )


def stage_set(
    ps: PatchSet, files: dict[str, bytes], patches: tuple[Patch, ...], *, reverse: bool = False
) -> dict[str, bytes]:
    """Dry-run then run each patch (forward in order, or reversed in reverse order) on a staging copy of ``files``."""
    tool = patch_tool()
    verb, then = ("reverse", " to get the originals") if reverse else ("apply", " then apply again")
    with tempfile.TemporaryDirectory(prefix="kimi-serve-patch-") as tmp:
        root = Path(tmp)
        stage(files, root)
        for patch in reversed(patches) if reverse else patches:
            for dry_run in (True, False):
                problem = run_patch(tool, patch.path, root, strip=ps.strip, reverse=reverse, dry_run=dry_run)
                if problem:
                    raise reinstall_error(
                        ps, f"{patch.name} does not {verb} cleanly: {problem}; nothing was changed", then
                    )
        return {rel: (root / rel).read_bytes() for rel in files}


def check_hashes(ps: PatchSet, staged: dict[str, bytes], which: str) -> None:
    for f in ps.files:
        if sha256_bytes(staged[f.path]) != getattr(f, which):
            raise KimiServeError(
                f"{f.path} does not come out as the manifest's {which!r} hash; nothing was changed",
                where=ps.name,
                hint="regenerate the patch set's manifest",
                exit_code=ExitCode.FAILED,
            )
