"""`check`'s patch layer: does the profile's SM120 patch set apply (offline) or is it applied (on the host)?"""

from __future__ import annotations

from kimi_serve.findings import SKIP, Finding
from kimi_serve.profile import Profile


def check_patches(profile: Profile, *, offline: bool) -> list[Finding]:
    if not profile.patch_set:
        return []
    return [Finding("patches", "patch_set", SKIP, "patch state not checked yet", "")]
