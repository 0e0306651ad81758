"""`check`'s patch layer: does the profile's SM120 patch set apply to the pinned wheel (offline, CI), and is it applied
to the SGLang that will serve (on the host)?"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.findings import FAIL, PASS, SKIP, WARN, Finding
from kimi_serve.core.pin import patches_apply
from kimi_serve.profile.loader import Profile

if TYPE_CHECKING:
    from kimi_serve.patches import PatchSet


def _wheel(status: str, message: str, fix: str = "", where: str = "") -> Finding:
    return Finding("patches", "wheel", status, message, fix, where)


def _installed(status: str, message: str, fix: str = "", where: str = "") -> Finding:
    return Finding("patches", "installed", status, message, fix, where)


def _offline(profile: Profile, patch_set: PatchSet) -> Finding:
    from kimi_serve.patches import cached_wheel, check_applies_to_wheel

    name, version = patch_set.name, patch_set.target_version
    wheel = cached_wheel(version)
    if wheel is None:
        said = f"pinned sglang {version} wheel not cached: cannot confirm {name} applies"
        return _wheel(WARN, said, "run scripts/fetch-sglang-wheel.sh")
    result = check_applies_to_wheel(patch_set, wheel)
    if result.ok:
        return _wheel(PASS, result.message)
    said = f"{name} does not apply to {wheel.name}: {result.message}"
    return _wheel(FAIL, said, "regenerate the patch set for this SGLang", profile.where("patch_set"))


def _on_host(profile: Profile, patch_set: PatchSet) -> Finding:
    from kimi_serve.patches import status
    from kimi_serve.sglang.site import site_packages_of

    python = profile.python
    if profile.engine == "simulator":
        return _installed(SKIP, "simulator engine: no GPU code runs, patches not needed")
    if not python:
        said = "no python: in the profile: cannot tell which SGLang will serve"
        return _installed(WARN, said, "set python: to the SGLang venv's interpreter", profile.where("python"))
    if not os.access(python, os.X_OK):
        return _installed(SKIP, f"interpreter {python} missing: patch state unknown (see the host layer)")
    try:
        st = status(site_packages_of(python), patch_set)
    except KimiServeError as exc:
        return _installed(FAIL, exc.message, exc.hint or "", profile.where("python"))
    if st.all_applied:
        return _installed(PASS, f"{patch_set.name} applied to {st.site_packages}")
    apply = patches_apply(profile.cli_args())
    if st.conflicts:
        names = ", ".join(p.name for p in st.conflicts)
        said = f"{patch_set.name} conflicts with local changes in {st.site_packages} ({names})"
        return _installed(FAIL, said, f"reinstall sglang=={st.target_version}, then {apply}")
    return _installed(FAIL, f"{patch_set.name} is not applied to {st.site_packages}", apply)


def check_patches(profile: Profile, *, offline: bool) -> list[Finding]:
    if not profile.patch_set:
        return []
    from kimi_serve.patches import load_patch_set

    findings = []
    for name in profile.patch_set:  # each set the profile names, checked on its own (they touch disjoint files)
        try:
            patch_set = load_patch_set(name)
        except KimiServeError:
            continue  # the rules layer already reported an unknown set
        findings.append(_offline(profile, patch_set))
        if not offline:
            findings.append(_on_host(profile, patch_set))
    return findings
