"""The model family's rules (docs/families.md): the profile's `model.family` against its own keys (thinking switches,
sampling, draft, context) and against the checkpoint's config.json where one is present (architecture, model_type,
stop ids). Kimi-K3 is refused with its size against the GPUs' memory. Failures are the profile's (exit 2), before
anything starts: `render`, `up` and `install-service` run these with the other fast rules."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kimi_serve.check.rule_kit import bad, ok
from kimi_serve.core.family import (
    FAMILIES,
    GPU_BYTES,
    K3,
    ModelFamily,
    accepts_draft,
    by_identity,
    draft_family,
    family,
    gb,
)
from kimi_serve.core.findings import SKIP, Finding
from kimi_serve.core.inputs import read_json
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile

TEMPLATE_FLAGS = ("--default-chat-template-kwargs", "--preferred-sampling-params")


def _k3_reason(p: Profile, checkpoint_bytes: int) -> str:
    gpus = p.gpus * p.nodes.count
    k3 = FAMILIES[K3]
    room = gpus * GPU_BYTES
    return (
        f"{k3.title} does not fit here: its checkpoint is {gb(checkpoint_bytes)} ({checkpoint_bytes:,} bytes) against "
        f"{gpus} x {gb(GPU_BYTES)} = {gb(room)} of GPU memory; it also needs the {k3.parsers} parsers, its own "
        "chat format and another speculative method"
    )


def rule_family(p: Profile, _: Launch) -> Iterator[Finding]:
    fam = family(p.model.family)
    if fam.name == K3:
        yield bad(
            p,
            "model.family",
            _k3_reason(p, fam.checkpoint_bytes),
            "serve kimi-k2.7-code or kimi-k2.6 on this box (configs/prod-k27-code.yaml, prod-k26.yaml); K3 needs 16+ "
            "GPUs across 2+ nodes",
        )
        return
    findings = list(_family_problems(p, fam))
    yield from findings
    if not findings:
        yield ok(
            "model.family",
            f"{fam.title}: {fam.parsers} parsers, stop id {fam.stop_id}, modes {'/'.join(fam.modes)}"
            + (f", sampling {' '.join(f'{k}={v:g}' for k, v in fam.sampling)}" if fam.sampling else ""),
        )


def _family_problems(p: Profile, fam: ModelFamily) -> Iterator[Finding]:
    m = p.model
    for flag in TEMPLATE_FLAGS:
        if flag in p.extra_args:
            yield bad(
                p,
                "extra_args",
                f"{flag} in extra_args: the model: section renders it from thinking/preserve_thinking/temperature/"
                "top_p (argparse would keep whichever comes last)",
                "set model.thinking, model.preserve_thinking, model.temperature or model.top_p instead",
            )
    if m.thinking is False and fam.thinking_only:
        yield bad(
            p,
            "model.thinking",
            f"{fam.title} only thinks: it has no instant mode, so a thinking: false default breaks every request "
            "that does not say",
            "remove model.thinking (or set it true)",
        )
    if m.preserve_thinking is not None and "preserve_thinking" not in fam.switches:
        yield bad(
            p,
            "model.preserve_thinking",
            f"{fam.title}'s chat template has no preserve_thinking switch (its history always drops earlier reasoning)",
            "remove model.preserve_thinking, or set model.family: kimi-k2.6",
        )
    for switch, value in fam.forced:
        if getattr(m, switch) is not None and getattr(m, switch) != value:
            yield bad(
                p,
                f"model.{switch}",
                f"{fam.title} fixes {switch} to {str(value).lower()}",
                f"remove model.{switch}",
            )
    for param, wanted in fam.sampling:
        got = getattr(m, param)
        if got is not None and got != wanted:
            yield bad(
                p,
                f"model.{param}",
                f"{fam.title}'s vendor accepts only {param} {wanted:g} (got {got:g}): clients that send the "
                "default get another model than the one Moonshot ships",
                f"set model.{param}: {wanted:g}",
            )
    if m.context_length is not None and m.context_length > fam.context:
        yield bad(
            p,
            "model.context_length",
            f"context_length {m.context_length} exceeds {fam.title}'s {fam.context:,} tokens",
            f"set model.context_length: {fam.context} or less",
        )
    draft = p.speculative.draft_model_path
    if p.speculative.enabled and draft and not accepts_draft(fam, draft):
        made_for = draft_family(draft)
        yield bad(
            p,
            "speculative.draft_model_path",
            f"draft {Path(draft).name} was made for {made_for.title if made_for else '?'}, but model.family is "
            f"{fam.name}: it would accept few of {fam.title}'s tokens",
            f"point it at a local copy of {fam.drafts[0].repo}",
        )


def _ids(value: Any) -> set[int]:
    items = value if isinstance(value, list) else [value]
    return {int(v) for v in items if isinstance(v, int) and not isinstance(v, bool)}


def checkpoint_stop_ids(config: dict[str, Any], generation: Any) -> set[int]:
    """The ids a checkpoint stops on: config.json's eos_token_id (top level or text_config's) and
    generation_config.json's, as SGLang merges them."""
    text = config.get("text_config")
    ids = _ids(config.get("eos_token_id")) | (_ids(text.get("eos_token_id")) if isinstance(text, dict) else set())
    return ids | (_ids(generation.get("eos_token_id")) if isinstance(generation, dict) else set())


def shard_bytes(directory: Path) -> int:
    return sum(q.stat().st_size for q in directory.glob("*.safetensors") if q.is_file())


def rule_checkpoint(p: Profile, _: Launch) -> Iterator[Finding]:
    """The checkpoint's config.json, where present, names the family the profile says (and no K3)."""
    directory = Path(p.model.path)
    config_file = directory / "config.json"
    if not config_file.is_file():
        return  # absent here (CI, a render for another host): the host layer reports the directory
    try:
        config = read_json(config_file)
        gen_file = directory / "generation_config.json"
        generation = read_json(gen_file) if gen_file.is_file() else None
    except (OSError, ValueError) as exc:
        yield bad(p, "model.path", f"{config_file} is unreadable ({exc})", "point model.path at the checkpoint")
        return
    if not isinstance(config, dict):
        yield bad(p, "model.path", f"{config_file} is not a JSON object", "point model.path at the checkpoint")
        return
    yield from _identity(p, family(p.model.family), config, config_file, generation)


def _identity(
    p: Profile, fam: ModelFamily, config: dict[str, Any], config_file: Path, generation: Any
) -> Iterator[Finding]:
    archs, model_type = config.get("architectures"), config.get("model_type")
    named = by_identity(archs, model_type)
    if named is not None and named.name == K3:
        size = shard_bytes(config_file.parent) or named.checkpoint_bytes
        yield bad(
            p,
            "model.path",
            f"{config_file} is a Kimi-K3 checkpoint ({archs}): " + _k3_reason(p, size),
            "point model.path at a Kimi-K2.5, K2.6 or K2.7-Code checkpoint",
        )
        return
    if named is None:  # another model (a small test checkpoint, a llama): nothing of the family to hold it to
        yield Finding(
            "rules",
            "model.checkpoint",
            SKIP,
            f"{config_file} names {archs} / {model_type!r}, no Kimi model: the family's facts are not checked "
            "against it",
        )
        return
    if named.architecture != fam.architecture:
        yield bad(
            p,
            "model.family",
            f"{config_file} names architectures {archs} and model_type {model_type!r}, not {fam.title}'s "
            f"{fam.architecture} / {fam.model_type}",
            "point model.path at a " + fam.title + " checkpoint, or set model.family to the model it holds",
        )
        return
    stops = checkpoint_stop_ids(config, generation)
    if not stops:  # declares none (a config-only test folder): nothing to hold the family's ids against
        yield ok("model.checkpoint", f"{config_file}: {fam.architecture}, no eos_token_id declared")
        return
    lacks, extra = sorted(set(fam.eos_ids) - stops), sorted(stops - set(fam.eos_ids))
    if lacks or extra:
        other = next((f for f in FAMILIES.values() if f.eos_ids and set(f.eos_ids) == stops), None)
        said = f"lacks stop id {lacks[0]}" if lacks else f"stops on {extra[0]} too"
        yield bad(
            p,
            "model.family",
            f"{config_file} (eos_token_id, with generation_config.json) {said}: {fam.title} stops on "
            f"{list(fam.eos_ids)}, this checkpoint on {sorted(stops)}",
            f"set model.family: {other.name}" if other else f"point model.path at a {fam.title} checkpoint",
        )
        return
    yield ok("model.checkpoint", f"{config_file}: {fam.architecture}, stop ids {sorted(stops)} ({fam.title})")


FAMILY_RULES = (rule_family, rule_checkpoint)
