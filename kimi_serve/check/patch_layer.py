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


def _offline(profile: Profile, patch_set: PatchSet) -> Finding:
    from kimi_serve.patches import cached_wheel, check_applies_to_wheel

    wheel = cached_wheel(patch_set.target_version)
    if wheel is None:
        return Finding(
            "patches",
            "wheel",
            WARN,
            f"pinned sglang {patch_set.target_version} wheel not cached: cannot confirm {patch_set.name} applies",
            "run scripts/fetch-sglang-wheel.sh",
        )
    result = check_applies_to_wheel(patch_set, wheel)
    if result.ok:
        return Finding("patches", "wheel", PASS, result.message)
    return Finding(
        "patches",
        "wheel",
        FAIL,
        f"{patch_set.name} does not apply to {wheel.name}: {result.message}",
        "regenerate the patch set for this SGLang",
        profile.where("patch_set"),
    )


def _on_host(profile: Profile, patch_set: PatchSet) -> Finding:
    from kimi_serve.patches import status
    from kimi_serve.sglang.site import site_packages_of

    python = profile.python
    if profile.engine == "simulator":
        return Finding("patches", "installed", SKIP, "simulator engine: no GPU code runs, patches not needed")
    if not python:
        return Finding(
            "patches",
            "installed",
            WARN,
            "no python: in the profile: cannot tell which SGLang will serve",
            "set python: to the SGLang venv's interpreter",
            profile.where("python"),
        )
    if not os.access(python, os.X_OK):
        return Finding(
            "patches", "installed", SKIP, f"interpreter {python} missing: patch state unknown (see the host layer)"
        )
    try:
        st = status(site_packages_of(python), patch_set)
    except KimiServeError as exc:
        return Finding("patches", "installed", FAIL, exc.message, exc.hint or "", profile.where("python"))
    if st.all_applied:
        return Finding("patches", "installed", PASS, f"{patch_set.name} applied to {st.site_packages}")
    if st.conflicts:
        names = ", ".join(p.name for p in st.conflicts)
        return Finding(
            "patches",
            "installed",
            FAIL,
            f"{patch_set.name} conflicts with local changes in {st.site_packages} ({names})",
            f"reinstall sglang=={st.target_version}, then {patches_apply(profile.cli_args())}",
        )
    return Finding(
        "patches",
        "installed",
        FAIL,
        f"{patch_set.name} is not applied to {st.site_packages}",
        patches_apply(profile.cli_args()),
    )


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
