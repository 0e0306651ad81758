"""SGLang source patch sets (the SM120 set and the log/secret redactions): manifest, state read from hashes, apply and
revert all-or-nothing, the offline check against the pinned wheel. Depends on core and sglang only; never imports
kimi_serve.service (or anything above it).

Modules: :mod:`.manifest` (what a set is, loading it), :mod:`.state` (status, records, staging), :mod:`.change`
(apply, revert), :mod:`.files` (file I/O and GNU patch), :mod:`.wheel` (offline check).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# Names resolve on first use (PEP 562), so a command that only needs DEFAULT_SET for its --help does not load the
# patch machinery (hashlib, subprocess, the journal) on the CLI's start-up path.
_HOME = {
    name: module
    for module, names in {
        "change": "ChangeResult apply apply_sets revert revert_sets",
        "names": "DEFAULT_SET",
        "manifest": "MANIFEST Patch PatchSet available_patch_sets load_patch_set",
        "state": "FileState PatchReport PatchStatus State status",
        "wheel": "WheelCheck cached_wheel check_applies_to_wheel",
    }.items()
    for name in names.split()
}
__all__ = [
    "DEFAULT_SET",
    "MANIFEST",
    "ChangeResult",
    "FileState",
    "Patch",
    "PatchReport",
    "PatchSet",
    "PatchStatus",
    "State",
    "WheelCheck",
    "apply",
    "apply_sets",
    "available_patch_sets",
    "cached_wheel",
    "check_applies_to_wheel",
    "load_patch_set",
    "revert",
    "revert_sets",
    "status",
]

if TYPE_CHECKING:
    from kimi_serve.patches.change import ChangeResult, apply, apply_sets, revert
    from kimi_serve.patches.manifest import MANIFEST, Patch, PatchSet, available_patch_sets, load_patch_set
    from kimi_serve.patches.names import DEFAULT_SET
    from kimi_serve.patches.state import FileState, PatchReport, PatchStatus, State, status
    from kimi_serve.patches.wheel import WheelCheck, cached_wheel, check_applies_to_wheel


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'kimi_serve.patches' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"kimi_serve.patches.{module}"), name)
    globals()[name] = value
    return value
