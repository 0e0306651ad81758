"""SGLang source patch sets: load, status, apply, revert, and the offline check against the pinned wheel.

A patch set is a folder under the shipped ``patches/`` resource: ordered unified diffs ``NNNN-name.patch`` and a
``manifest.json`` naming the set, the sglang version it targets, the features it enables, and for every file it touches
the sha256 before and after (per patch, and for the whole set). Hashes decide state, so status needs no patch tool:

- a file is *original* (manifest "before"), *patched* (manifest "after"), part-way along its patch chain, or *modified*
  (neither: someone else changed it);
- a patch is *applied* when all its files are at or past it, *not applied* when none are, else *conflict*.

Apply is all-or-nothing: refuse unless every file is original; dry-run then apply every patch, in order, on a staging
copy; require the staged files to hash to the manifest's "after"; keep the originals as backups in the state dir; then
swap all files in (undoing on failure) and write a record. Revert puts the backups (or, without a record, the reverse
patches) back and checks the result against the manifest's "before" hashes, so the originals come back byte for byte.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any

from kimi_serve import __version__
from kimi_serve.errors import ExitCode, KimiServeError
from kimi_serve.patch_files import (
    Content,
    patch_tool,
    read_content,
    replace_all,
    run_patch,
    sha256_bytes,
    sha256_file,
    stage,
)
from kimi_serve.resources import resource_dir
from kimi_serve.sglang_site import installed_version, wheel_version

DEFAULT_SET = "sglang-0.5.23-sm120"
DEFAULT_STATE_ROOT = Path("/var/lib/kimi-serve")
STATE_ENV = "KIMI_SERVE_STATE_DIR"
WHEEL_CACHE_ENV = "KIMI_SERVE_WHEEL_CACHE"  # where scripts/fetch-sglang-wheel.sh keeps the pinned wheel
MANIFEST = "manifest.json"
_SCHEMA = 1


# ---------------------------------------------------------------------------------------------------------- model


@dataclass(frozen=True)
class FileChange:
    path: str  # relative to site-packages, e.g. sglang/srt/layers/flashinfer_comm_fusion.py
    before: str
    after: str


@dataclass(frozen=True)
class Patch:
    name: str
    path: Path
    sha256: str
    feature: str
    gates: tuple[str, ...]
    changes: tuple[FileChange, ...]

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(c.path for c in self.changes)


@dataclass(frozen=True)
class PatchSet:
    name: str
    target_version: str
    description: str
    directory: Path
    strip: int
    features: dict[str, str]  # feature id -> what it enables
    patches: tuple[Patch, ...]
    files: tuple[FileChange, ...]  # whole set: original -> fully patched

    def chain(self, rel: str) -> list[str]:
        """The hashes ``rel`` goes through: the original, then after each patch that touches it, in order."""
        first = next(f for f in self.files if f.path == rel)
        return [first.before] + [c.after for p in self.patches for c in p.changes if c.path == rel]

    def patches_for(self, feature: str) -> tuple[Patch, ...]:
        return tuple(p for p in self.patches if p.feature == feature)


def _manifest_error(path: Path, message: str) -> KimiServeError:
    return KimiServeError(message, where=str(path), hint="fix the patch set or regenerate its manifest")


def _read_manifest(directory: Path) -> PatchSet:
    path = directory / MANIFEST
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        if raw.get("schema") != _SCHEMA:
            raise _manifest_error(path, f"schema {raw.get('schema')!r} is not {_SCHEMA}")
        patches = tuple(
            Patch(
                name=p["file"],
                path=directory / p["file"],
                sha256=p["sha256"],
                feature=p["feature"],
                gates=tuple(p.get("gates", ())),
                changes=tuple(FileChange(rel, h["before"], h["after"]) for rel, h in p["files"].items()),
            )
            for p in raw["patches"]
        )
        patch_set = PatchSet(
            name=raw["name"],
            target_version=raw["target"]["version"],
            description=raw.get("description", ""),
            directory=directory,
            strip=int(raw.get("strip", 1)),
            features=dict(raw["features"]),
            patches=patches,
            files=tuple(FileChange(rel, h["before"], h["after"]) for rel, h in raw["files"].items()),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise _manifest_error(path, f"unreadable patch-set manifest ({type(exc).__name__}: {exc})") from exc
    _validate(patch_set, path)
    return patch_set


def _validate(ps: PatchSet, path: Path) -> None:
    touched = {c.path for p in ps.patches for c in p.changes}
    if touched != {f.path for f in ps.files}:
        raise _manifest_error(path, "'files' does not list exactly the files the patches touch")
    for p in ps.patches:
        if p.feature not in ps.features:
            raise _manifest_error(path, f"{p.name}: feature {p.feature!r} is not declared in 'features'")
        actual = sha256_file(p.path)
        if actual is None:
            raise _manifest_error(path, f"{p.name} is missing")
        if actual != p.sha256:
            raise _manifest_error(path, f"{p.name}: sha256 {actual[:12]}… does not match the manifest")
    for f in ps.files:
        steps = [c for p in ps.patches for c in p.changes if c.path == f.path]
        chained = all(a.after == b.before for a, b in zip(steps, steps[1:], strict=False))
        if not chained or steps[0].before != f.before or steps[-1].after != f.after:
            raise _manifest_error(path, f"{f.path}: per-patch hashes do not chain from 'before' to 'after'")


def available_patch_sets() -> dict[str, Path]:
    """Shipped patch sets: name -> folder."""
    found: dict[str, Path] = {}
    root = resource_dir("patches")
    for manifest in sorted(root.glob(f"*/{MANIFEST}")):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            found[json.loads(manifest.read_text(encoding="utf-8"))["name"]] = manifest.parent
    return found


def load_patch_set(name: str) -> PatchSet:
    """A shipped patch set by name (e.g. ``sglang-0.5.23-sm120``), or a folder holding a manifest.json."""
    folder = Path(name)
    if (folder / MANIFEST).is_file():
        return _read_manifest(folder.resolve())
    sets = available_patch_sets()
    if name not in sets:
        known = ", ".join(sorted(sets)) or "none"
        raise KimiServeError(f"unknown patch set {name!r} (known: {known})", hint="name a shipped patch set")
    return _read_manifest(sets[name])


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
    set_name: str
    target_version: str
    site_packages: Path
    sglang_version: str
    patches: list[PatchReport]
    files: list[FileState]
    record: dict[str, Any] | None = None
    features: dict[str, bool] = field(default_factory=dict)  # feature -> all its patches applied

    @property
    def all_applied(self) -> bool:
        return all(p.state is State.APPLIED for p in self.patches)

    @property
    def pristine(self) -> bool:
        return all(f.position == 0 for f in self.files)

    @property
    def conflicts(self) -> list[PatchReport]:
        return [p for p in self.patches if p.state is State.CONFLICT]

    def to_dict(self) -> dict[str, Any]:
        return {
            "set": self.set_name,
            "target_version": self.target_version,
            "site_packages": str(self.site_packages),
            "sglang_version": self.sglang_version,
            "applied": self.all_applied,
            "features": self.features,
            "patches": [{"name": p.name, "feature": p.feature, "state": p.state.value, "detail": p.detail}
                        for p in self.patches],
            "files": [{"path": f.path, "state": f.label, "sha256": f.sha256} for f in self.files],
            "record": self.record,
        }


def _require_version(site_packages: Path, ps: PatchSet) -> str:
    found = installed_version(site_packages)
    if found != ps.target_version:
        raise KimiServeError(
            f"patch set {ps.name} is for sglang {ps.target_version}, found sglang {found} in {site_packages}",
            hint=f"install sglang=={ps.target_version} or use a patch set made for {found}",
            exit_code=ExitCode.ENVIRONMENT)
    return found


def _file_states(site_packages: Path, ps: PatchSet) -> dict[str, FileState]:
    states = {}
    for f in ps.files:
        chain = ps.chain(f.path)
        digest = sha256_file(site_packages / f.path)
        position = chain.index(digest) if digest in chain else None
        states[f.path] = FileState(f.path, digest, position, len(chain))
    return states


def _patch_reports(ps: PatchSet, files: dict[str, FileState]) -> list[PatchReport]:
    reports = []
    for patch in ps.patches:
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
            reports.append(PatchReport(patch.name, patch.feature, State.CONFLICT, "; ".join(details)))
        elif all(done):
            reports.append(PatchReport(patch.name, patch.feature, State.APPLIED))
        elif not any(done):
            reports.append(PatchReport(patch.name, patch.feature, State.NOT_APPLIED))
        else:
            reports.append(PatchReport(patch.name, patch.feature, State.CONFLICT, "only some of its files patched"))
    return reports


def status(site_packages: Path, patch_set: PatchSet, *, state_dir: Path | None = None) -> PatchStatus:
    """Per-patch state of ``patch_set`` in ``site_packages`` (refuses another sglang version)."""
    version = _require_version(site_packages, patch_set)
    files = _file_states(site_packages, patch_set)
    reports = _patch_reports(patch_set, files)
    features = {feat: all(r.state is State.APPLIED for r in reports if r.feature == feat)
                for feat in patch_set.features}
    record = _read_record(_record_dir(state_dir, patch_set, site_packages) / "record.json")
    return PatchStatus(patch_set.name, patch_set.target_version, site_packages, version, reports,
                       list(files.values()), record, features)


# ------------------------------------------------------------------------------------------------ state & records


def state_root(state_dir: Path | None = None) -> Path:
    """kimi-serve's state root: ``state_dir``, else $KIMI_SERVE_STATE_DIR, else /var/lib/kimi-serve."""
    if state_dir is not None:
        return state_dir
    env = os.environ.get(STATE_ENV)
    return Path(env) if env else DEFAULT_STATE_ROOT


def _record_dir(state_dir: Path | None, ps: PatchSet, site_packages: Path) -> Path:
    key = sha256_bytes(str(site_packages.resolve()).encode())[:16]
    return state_root(state_dir) / "patches" / ps.name / key


@contextlib.contextmanager
def _locked(record_dir: Path) -> Iterator[None]:
    try:
        record_dir.parent.mkdir(parents=True, exist_ok=True)
        lock = open(record_dir.parent / f"{record_dir.name}.lock", "w")  # noqa: SIM115 - held for the block
    except OSError as exc:
        raise KimiServeError(f"cannot write the patch state dir {record_dir.parent}: {exc.strerror}",
                             hint=f"run as root, or pass --state-dir DIR (or set {STATE_ENV})",
                             exit_code=ExitCode.ENVIRONMENT) from exc
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return {"unreadable": f"{path}: {exc}"}


def _write_backups(backup: Path, originals: dict[str, Content]) -> None:
    for rel, content in originals.items():
        target = backup / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.data)
        os.chmod(target, content.mode)
        os.utime(target, ns=(content.mtime_ns, content.mtime_ns))


def _not_writable(site_packages: Path, exc: OSError) -> KimiServeError:
    return KimiServeError(f"cannot write into {site_packages}: {exc.strerror or exc}",
                          hint="run as root or as the owner of the SGLang venv", exit_code=ExitCode.ENVIRONMENT)


# ---------------------------------------------------------------------------------------------------------- apply


def _stage(ps: PatchSet, files: dict[str, bytes], patches: tuple[Patch, ...], *, reverse: bool = False
           ) -> dict[str, bytes]:
    """Dry-run then run each patch (forward in order, or reversed in reverse order) on a staging copy of ``files``."""
    tool = patch_tool()
    verb = "reverse" if reverse else "apply"
    after_fix = "to get the originals" if reverse else "then apply again"
    with tempfile.TemporaryDirectory(prefix="kimi-serve-patch-") as tmp:
        root = Path(tmp)
        stage(files, root)
        for patch in reversed(patches) if reverse else patches:
            for dry_run in (True, False):
                problem = run_patch(tool, patch.path, root, strip=ps.strip, reverse=reverse, dry_run=dry_run)
                if problem:
                    raise KimiServeError(f"{patch.name} does not {verb} cleanly: {problem}; nothing was changed",
                                         where=ps.name, hint=f"reinstall sglang=={ps.target_version} "
                                         f"(pip install --force-reinstall --no-deps) {after_fix}",
                                         exit_code=ExitCode.FAILED)
        return {rel: (root / rel).read_bytes() for rel in files}


def _check_hashes(ps: PatchSet, staged: dict[str, bytes], which: str) -> None:
    for f in ps.files:
        if sha256_bytes(staged[f.path]) != getattr(f, which):
            raise KimiServeError(f"{f.path} does not come out as the manifest's {which!r} hash; nothing was changed",
                                 where=ps.name, hint="regenerate the patch set's manifest",
                                 exit_code=ExitCode.FAILED)


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
    staged = _stage(patch_set, {rel: c.data for rel, c in originals.items()}, patch_set.patches)
    _check_hashes(patch_set, staged, "after")

    record_dir = _record_dir(state_dir, patch_set, site_packages)
    record = record_dir / "record.json"
    pending = record.with_name(".record.json.tmp")
    with _locked(record_dir):
        shutil.rmtree(record_dir, ignore_errors=True)
        try:  # backups and the record first: nothing in the install changes unless both could be written
            _write_backups(record_dir / "backup", originals)
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
                                 hint=f"free space there, or pass --state-dir DIR (or set {STATE_ENV})",
                                 exit_code=ExitCode.ENVIRONMENT) from exc
        try:
            replace_all(site_packages, {rel: Content(staged[rel], c.mode) for rel, c in originals.items()})
        except OSError as exc:
            shutil.rmtree(record_dir, ignore_errors=True)
            raise _not_writable(site_packages, exc) from exc
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
    record_dir = _record_dir(state_dir, patch_set, site_packages)
    if before.pristine:
        if record_dir.exists():
            with _locked(record_dir):
                shutil.rmtree(record_dir, ignore_errors=True)
        return ChangeResult(False, before, f"{patch_set.name}: not applied, nothing to revert")
    unknown = [f for f in before.files if f.position not in (0, f.chain_length - 1)]
    if unknown:
        bad = unknown[0]
        raise KimiServeError(f"{bad.path} is {bad.label}; reverting would discard changes kimi-serve did not make, "
                             "nothing was changed", where=patch_set.name,
                             hint=f"reinstall sglang=={patch_set.target_version} (pip install --force-reinstall "
                                  "--no-deps) to get the originals", exit_code=ExitCode.FAILED)
    with _locked(record_dir):
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
            restored = _stage(patch_set, {rel: c.data for rel, c in current.items()}, applied, reverse=True)
            _check_hashes(patch_set, restored, "before")
            originals = {rel: Content(restored[rel], current[rel].mode) for rel in restored}
        changed = {f.path: originals[f.path] for f in before.files if f.position != 0}
        try:
            replace_all(site_packages, changed)
        except OSError as exc:
            raise _not_writable(site_packages, exc) from exc
        shutil.rmtree(record_dir, ignore_errors=True)
    after = status(site_packages, patch_set, state_dir=state_dir)
    return ChangeResult(True, after, f"{patch_set.name}: restored {len(changed)} original files from {source}")


# ------------------------------------------------------------------------------------------------- offline check


@dataclass
class WheelCheck:
    ok: bool
    wheel: Path
    wheel_version: str | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "wheel": str(self.wheel), "wheel_version": self.wheel_version, "message": self.message}


def cached_wheel(version: str) -> Path | None:
    """The pinned sglang wheel: $KIMI_SERVE_SGLANG_WHEEL, else the one scripts/fetch-sglang-wheel.sh cached
    ($KIMI_SERVE_WHEEL_CACHE or ~/.cache/kimi-serve/wheels)."""
    if os.environ.get("KIMI_SERVE_SGLANG_WHEEL"):
        return Path(os.environ["KIMI_SERVE_SGLANG_WHEEL"])
    cache = Path(os.environ.get(WHEEL_CACHE_ENV) or Path.home() / ".cache" / "kimi-serve" / "wheels")
    wheels = sorted(cache.glob(f"sglang-{version}-*.whl"))
    return wheels[0] if wheels else None


def check_applies_to_wheel(patch_set: PatchSet, wheel_path: Path) -> WheelCheck:
    """Offline (CI): do the patches apply cleanly to the sglang wheel and give the manifest's 'after' hashes?"""
    try:
        with zipfile.ZipFile(wheel_path) as wheel:
            version = wheel_version(wheel)
            originals = {}
            for f in patch_set.files:
                try:
                    originals[f.path] = wheel.read(f.path)
                except KeyError:
                    return WheelCheck(False, wheel_path, version, f"{f.path} is not in the wheel")
    except (OSError, zipfile.BadZipFile) as exc:
        raise KimiServeError(f"cannot read wheel {wheel_path}: {exc}",
                             hint="scripts/fetch-sglang-wheel.sh downloads the pinned wheel",
                             exit_code=ExitCode.ENVIRONMENT) from exc
    if version != patch_set.target_version:
        return WheelCheck(False, wheel_path, version,
                          f"{patch_set.name} is for sglang {patch_set.target_version}, the wheel is {version}")
    for f in patch_set.files:
        if sha256_bytes(originals[f.path]) != f.before:
            return WheelCheck(False, wheel_path, version, f"{f.path} in the wheel differs from the manifest's original")
    try:
        staged = _stage(patch_set, originals, patch_set.patches)
        _check_hashes(patch_set, staged, "after")
    except KimiServeError as exc:
        if exc.exit_code is ExitCode.ENVIRONMENT:
            raise
        return WheelCheck(False, wheel_path, version, exc.message)
    return WheelCheck(True, wheel_path, version,
                      f"{len(patch_set.patches)} patches apply cleanly to {wheel_path.name} and match the manifest")
