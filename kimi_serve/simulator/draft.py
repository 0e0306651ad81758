"""The speculative draft's model class, resolved by SGLang's own code the way its start-up resolves it.

A real start builds the draft's ``ModelConfig`` in draft mode (``resolve_spec_aux_hidden_state_config``) and asks the
model registry for the class ``architectures[0]`` names and its draft tensor-parallel declaration; the simulator runs
the same steps after the argument resolution (args.py), so a draft the real start would refuse stops it, and with it
``check --contract``, with one line.

Importing SGLang's registry imports all ~290 model modules (4-11 s on two busy cores), so only the modules whose source
names the class are imported, and the class is taken from their ``EntryClass`` as the registry takes it. SGLang is
imported inside the functions only, so the kimi-serve side can read the log prefix without it.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.inputs import read_json

LOG_PREFIX = "kimi-serve simulator: draft: "  # the log line the contract dry run reports (check/dryrun.py)
MLA_FIELDS = ("kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
PROD_DRAFT_CLASS = "Eagle3DeepseekV2ForCausalLM"  # lightseekorg/kimi-k2.5-eagle3-mla, prod's draft


@dataclass(frozen=True)
class DraftClass:
    """What SGLang resolved for the draft."""

    path: str  # the directory SGLang read (the stand-in's when the profile's is absent here)
    architecture: str  # after SGLang's draft-mode rewrite of config.json's architectures[0]
    module: str  # the sglang.srt.models module whose EntryClass registers it
    sglang_version: str
    attention: str  # "MLA", "MHA", ...
    shape: tuple[tuple[str, int], ...]  # the attention fields SGLang's ModelConfig derived
    layers: int | None  # the draft's KV layers (SGLang's eagle_draft_num_layers)
    aux_layer_ids: tuple[int, ...] | None  # EAGLE-3: the target layers whose hidden states feed the draft
    tp_execution: str  # the class's DraftParallelSpec (single_group: the draft runs on one TP group)

    def describe(self) -> str:
        shape = ", ".join(f"{name} {value}" for name, value in self.shape)
        parts = [f"{self.attention} attention ({shape})" if shape else f"{self.attention} attention"]
        if self.layers is not None:
            parts.append(f"{self.layers} layer{'s' if self.layers != 1 else ''}")
        if self.aux_layer_ids is not None:
            parts.append(f"aux hidden states of target layers {list(self.aux_layer_ids)}")
        parts.append(f"draft TP {self.tp_execution}")
        return (
            f"SGLang {self.sglang_version} resolves {self.architecture} ({self.module}) for the draft {self.path}: "
            + ", ".join(parts)
        )


def _refused(path: str, message: str, hint: str, key: str | None = "architectures") -> KimiServeError:
    where = Path(path) / "config.json"
    return KimiServeError(message, where=f"{where}: {key}" if key else str(where), hint=hint, exit_code=ExitCode.USAGE)


def check_declared(path: str) -> None:
    """Refuse a draft whose config.json has no ``architectures`` (SGLang's own reading of it, in the argument
    resolution and in ModelConfig, fails with a bare IndexError or TypeError); run before SGLang reads it. A file
    that cannot be read as JSON is left to SGLang's own reading."""
    try:
        data = read_json(Path(path) / "config.json")
    except (OSError, ValueError):
        return
    if isinstance(data, dict) and not data.get("architectures"):
        raise _refused(
            path,
            "the draft model's config names no architecture, so SGLang cannot pick its class",
            f'set "architectures": ["{PROD_DRAFT_CLASS}"] (prod\'s kimi-k2.5-eagle3-mla) or its checkpoint\'s class',
        )


def registered_class(architecture: str) -> tuple[Any, str] | None:
    """``(class, module)`` that SGLang's model registry holds under ``architecture``; None when no module of
    ``sglang.srt.models`` registers it. Only the modules whose source names it are imported (see the module doc)."""
    import sglang.srt.models as models

    root = Path(models.__path__[0])
    needle = architecture.encode()
    name = re.compile(rb"\b" + re.escape(needle) + rb"\b")
    for info in pkgutil.iter_modules(models.__path__, models.__name__ + "."):
        source = root / f"{info.name.rsplit('.', 1)[1]}.py"
        if info.ispkg or not source.is_file():
            continue
        text = source.read_bytes()  # ~6.7 MB in all: bytes, searched for the name first (~0.05 s)
        if needle not in text or b"EntryClass" not in text or not name.search(text):
            continue
        entry = getattr(importlib.import_module(info.name), "EntryClass", None)
        for cls in entry if isinstance(entry, list) else [entry]:
            if cls is not None and cls.__name__ == architecture:
                return cls, info.name
    return None


def _shape(config: Any) -> tuple[str, tuple[tuple[str, int], ...]]:
    arch = getattr(config.attention_arch, "name", str(config.attention_arch))
    if arch == "MLA":
        text = config.hf_text_config
        return arch, tuple((f, int(getattr(text, f))) for f in MLA_FIELDS if getattr(text, f, None) is not None)
    fields = (("head_dim", config.head_dim), ("kv_heads", config.get_total_num_kv_heads()))
    return arch, tuple((f, int(v)) for f, v in fields if v is not None)


def resolve_draft(server_args: Any) -> DraftClass | None:
    """SGLang's resolution of the draft of ``server_args`` (resolved and published); None without a draft model.
    A draft SGLang cannot read, or whose class no module registers: :class:`KimiServeError` (exit 2) naming the
    draft's config.json and the fix."""
    import sglang
    from sglang.srt.arg_groups.overrides import model_config_of
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        resolve_spec_aux_hidden_state_config,
    )
    from sglang.srt.runtime_context import get_spec
    from sglang.srt.speculative.draft_parallel import legacy_draft_parallel_spec
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    spec = get_spec()
    path = spec.speculative_draft_model_path
    if not path:
        return None
    version = sglang.__version__
    algorithm = SpeculativeAlgorithm.from_string(spec.speculative_algorithm)
    try:  # the target's model runner, at start-up: the draft read in draft mode
        aux = resolve_spec_aux_hidden_state_config(
            server_args=server_args,
            model_config=model_config_of(server_args),
            spec_algorithm=algorithm,
            is_draft_worker=False,
        )
        config = aux.draft_model_config or ModelConfig.from_server_args(
            server_args,
            model_path=path,
            model_revision=spec.speculative_draft_model_revision,
            is_draft_model=True,
        )
        attention, shape = _shape(config)
    except Exception as exc:  # noqa: BLE001 - SGLang's own refusal, whatever its type, is the message
        first = f"{type(exc).__name__}: {exc}".splitlines()[0]
        raise _refused(
            path,
            f"SGLang {version} cannot read the draft model's config: {first}",
            f"give the draft directory the config.json of its checkpoint (prod's draft: {PROD_DRAFT_CLASS})",
            key=None,
        ) from None
    architectures = list(config.hf_config.architectures)
    try:
        found = registered_class(architectures[0])
    except Exception as exc:  # noqa: BLE001 - the module that registers it does not import: the start cannot load it
        first = f"{type(exc).__name__}: {exc}".splitlines()[0]
        raise _refused(
            path,
            f"SGLang {version}'s module for {architectures[0]} does not import here: {first}",
            "run the dry run with the profile's own python (the engine the server runs), or report it with the log",
        ) from None
    if found is None:
        raise _refused(
            path,
            f"SGLang {version} has no model class {architectures[0]}: no module of sglang.srt.models registers it, so"
            " the real start cannot load this draft",
            f"name the draft's class in architectures ({PROD_DRAFT_CLASS} for prod's kimi-k2.5-eagle3-mla), or point"
            f" speculative.draft_model_path at a draft SGLang {version} supports",
        )
    cls, module = found
    parallel = getattr(cls, "draft_parallel_spec", None) or legacy_draft_parallel_spec(algorithm)
    ids = aux.eagle_aux_hidden_state_layer_ids
    return DraftClass(
        path=str(path),
        architecture=architectures[0],
        module=module,
        sglang_version=version,
        attention=attention,
        shape=shape,
        layers=aux.eagle_draft_num_layers,
        aux_layer_ids=tuple(int(i) for i in ids) if ids is not None else None,
        tp_execution=str(getattr(parallel.tp_execution, "value", parallel.tp_execution)),
    )
