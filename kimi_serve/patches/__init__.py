"""SGLang source patch sets (the SM120 set and the log/secret redactions): manifest, state read from hashes, apply and
revert all-or-nothing, the offline check against the pinned wheel. Depends on core and sglang only; never imports
kimi_serve.service (or anything above it).

Modules: :mod:`.manifest` (what a set is, loading it), :mod:`.state` (status, records, staging), :mod:`.change`
(apply, revert), :mod:`.files` (file I/O and GNU patch), :mod:`.wheel` (offline check).
"""

from __future__ import annotations

from kimi_serve.patches.change import ChangeResult, apply, revert
from kimi_serve.patches.manifest import DEFAULT_SET, MANIFEST, Patch, PatchSet, available_patch_sets, load_patch_set
from kimi_serve.patches.state import FileState, PatchReport, PatchStatus, State, status
from kimi_serve.patches.wheel import WheelCheck, cached_wheel, check_applies_to_wheel

__all__ = [
    "DEFAULT_SET", "MANIFEST", "ChangeResult", "FileState", "Patch", "PatchReport", "PatchSet", "PatchStatus", "State",
    "WheelCheck", "apply", "available_patch_sets", "cached_wheel", "check_applies_to_wheel", "load_patch_set",
    "revert", "status",
]
