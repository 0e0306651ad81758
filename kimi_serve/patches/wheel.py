"""The offline check (CI): does a patch set apply to the pinned sglang wheel and give the manifest's hashes?"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.settings import Settings, current
from kimi_serve.patches.files import sha256_bytes
from kimi_serve.patches.manifest import PatchSet
from kimi_serve.patches.state import check_hashes, stage_set
from kimi_serve.sglang.site import wheel_version

# ------------------------------------------------------------------------------------------------- offline check


@dataclass
class WheelCheck:
    ok: bool
    wheel: Path
    wheel_version: str | None
    message: str


def cached_wheel(version: str, settings: Settings | None = None) -> Path | None:
    """The pinned sglang wheel: $KIMI_SERVE_SGLANG_WHEEL, else the one scripts/fetch-sglang-wheel.sh cached
    ($KIMI_SERVE_WHEEL_CACHE or ~/.cache/kimi-serve/wheels)."""
    s = settings or current()
    if s.sglang_wheel is not None:
        return s.sglang_wheel
    wheels = sorted(s.wheel_cache_dir.glob(f"sglang-{version}-*.whl"))
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
        raise KimiServeError(
            f"cannot read wheel {wheel_path}: {exc}",
            hint="scripts/fetch-sglang-wheel.sh downloads the pinned wheel",
            exit_code=ExitCode.ENVIRONMENT,
        ) from exc
    if version != patch_set.target_version:
        problem = f"{patch_set.name} is for sglang {patch_set.target_version}, the wheel is {version}"
        return WheelCheck(False, wheel_path, version, problem)
    for f in patch_set.files:
        if sha256_bytes(originals[f.path]) != f.before:
            return WheelCheck(False, wheel_path, version, f"{f.path} in the wheel differs from the manifest's original")
    try:
        check_hashes(patch_set, stage_set(patch_set, originals, patch_set.patches), "after")
    except KimiServeError as exc:
        if exc.exit_code is ExitCode.ENVIRONMENT:
            raise
        return WheelCheck(False, wheel_path, version, exc.message)
    done = f"{len(patch_set.patches)} patches apply cleanly to {wheel_path.name} and match the manifest"
    return WheelCheck(True, wheel_path, version, done)
