"""The patch-set rules: the SM120-gated features a profile uses (FlashInfer allreduce fusion, torch symmetric
memory) and the API-key redaction its key needs must be covered by its ``patch_set`` (docs/patches.md)."""

from __future__ import annotations

from collections.abc import Iterator

from kimi_serve.check.rule_kit import bad, ok
from kimi_serve.core.findings import WARN, Finding
from kimi_serve.core.pin import PATCH_SET
from kimi_serve.profile.flags import load_flag_table
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile

# Features a profile can use that SGLang 0.5.23 gates off on SM120 (patch-set feature ids).
FEATURE_FUSION = "flashinfer_allreduce_fusion"
FEATURE_TORCH_SYMM_MEM = "torch_symm_mem"
# Patch-set feature that keeps the API keys out of SGLang's startup `server_args=` log line (hence the journal).
FEATURE_REDACT = "redact_api_key_in_log"
FEATURE_REDACT_INFO = "redact_api_key_in_server_info"


def rule_patch_set(p: Profile, _: Launch) -> Iterator[Finding]:
    """SM120 needs source patches for fusion and torch symm mem; the profile must name a set that covers them."""
    ar = p.allreduce
    used = ((FEATURE_FUSION, ar.flashinfer_fusion_backend), (FEATURE_TORCH_SYMM_MEM, ar.torch_symm_mem))
    features = [f for f, on in used if on]
    if not features:
        yield ok("patch_set", "no SM120-gated feature used")
        return
    if not p.patch_set:
        yield bad(
            p,
            "patch_set",
            f"{', '.join(features)} need SGLang source patches on SM120 (unpatched: "
            "fusion crashes at init, torch symm mem silently disables itself)",
            f"set patch_set: {PATCH_SET}",
        )
        return
    from kimi_serve.patches import load_patch_set  # lazily: reads the manifest

    named = "+".join(p.patch_set)
    sets = []
    for name in p.patch_set:
        try:
            sets.append(load_patch_set(name))
        except Exception as exc:  # noqa: BLE001 - any failure to load a named set is this rule's finding
            yield bad(
                p,
                "patch_set",
                f"patch set {name!r} cannot be used: {exc}",
                "name sets under patches/ (kimi-serve patches status lists them)",
            )
            return
    covered = {f for ps in sets for f in ps.features}
    missing = [f for f in features if f not in covered]
    other = [ps for ps in sets if ps.target_version != load_flag_table().sglang_version]
    if missing:
        yield bad(
            p,
            "patch_set",
            f"patch set {named!r} does not cover {', '.join(missing)}",
            "use a set that covers them or turn the feature off in allreduce",
        )
    elif other:
        yield bad(
            p,
            "patch_set",
            f"patch set {other[0].name!r} targets SGLang {other[0].target_version}, the "
            f"profile targets {load_flag_table().sglang_version}",
            "use the set made for the target SGLang",
        )
    else:
        yield ok("patch_set", f"patch set {named} covers {', '.join(features)}")


# Each redaction feature: its finding's code, what it keeps the key out of, and what happens without it.
_REDACTIONS = (
    (
        FEATURE_REDACT,
        "patch_set.redact",
        "keeps the API key out of SGLang's startup log",
        "the API key from server.api_key_file would be written to the journal by SGLang's startup log "
        "(server_args=...)",
    ),
    (
        FEATURE_REDACT_INFO,
        "patch_set.redact_server_info",
        "keeps the API keys out of SGLang's /server_info",
        "SGLang's /server_info would return the API key and the admin key (and a launch command holding them) to "
        "every API client",
    ),
)


def rule_patch_set_redact(p: Profile, _: Launch) -> Iterator[Finding]:
    """SGLang 0.5.23 logs its server_args at startup and returns them from /server_info, API keys in clear text;
    only a patched SGLang redacts them (patches 0006 and 0007)."""
    if p.engine != "sglang" or not p.server.api_key_file:
        yield ok("patch_set.redact", "no API key handed to SGLang")
        return
    features: dict[str, str] = {}
    named = "+".join(p.patch_set)
    if p.patch_set:
        from kimi_serve.patches import load_patch_set  # lazily: reads the manifest

        try:
            for name in p.patch_set:
                features.update(load_patch_set(name).features)
        except Exception:  # noqa: BLE001 - rule_patch_set reports a set that cannot be loaded
            return
    for feature, code, keeps, leak in _REDACTIONS:
        if feature in features:
            yield ok(code, f"patch set {named} {keeps}")
        else:
            fix = f"use a patch set covering {feature} (patch_set: {PATCH_SET})"
            said = f"{leak}: patch set {named or '(none)'} does not cover {feature}"
            yield Finding("rules", code, WARN, said, fix, p.where("patch_set"))
