"""SGLang source patch sets: load, status, apply, revert, and the offline check against the pinned wheel.

A patch set is a folder under the shipped ``patches/`` resource: ordered unified diffs ``NNNN-name.patch`` and a
``manifest.json`` naming the set, the sglang version it targets, the features it enables, and for every file it touches
the sha256 before and after (per patch, and for the whole set). Hashes decide state, so status needs no patch tool:

- a file is *original* (manifest "before"), *patched* (manifest "after"), part-way along its patch chain, or *modified*
  (neither: someone else changed it);
- a patch is *applied* when all its files are at or past it, *not applied* when none are, else *conflict*.

Apply and revert (all-or-nothing, byte for byte): :mod:`kimi_serve.patches.change`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.inputs import read_json
from kimi_serve.core.resources import resource_dir
from kimi_serve.patches.files import sha256_file

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


def reinstall_error(ps: PatchSet, message: str, then: str = "") -> KimiServeError:
    """Exit 1 for ``ps``, fixed by reinstalling the original sglang (``then``: what to do after)."""
    hint = f"reinstall sglang=={ps.target_version} (pip install --force-reinstall --no-deps){then}"
    return KimiServeError(message, where=ps.name, hint=hint, exit_code=ExitCode.FAILED)


def _manifest_error(path: Path, message: str) -> KimiServeError:
    return KimiServeError(message, where=str(path), hint="fix the patch set or regenerate its manifest")


def _read_manifest(directory: Path) -> PatchSet:
    path = directory / MANIFEST
    try:
        raw = read_json(path)
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
            found[read_json(manifest)["name"]] = manifest.parent
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
