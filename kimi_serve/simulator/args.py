"""SGLang's own argument handling for the simulator: parse, substitute missing model directories, resolve, publish.

The argv is what ``python -m sglang.launch_server`` accepts (SGLang's ``prepare_server_args``: argparse errors exit 2);
resolution runs under a simulated SM120 platform, so SM120-dependent defaults come out as on the serving host. Model
directories absent here are replaced by the config-only stand-ins of assets/ (resolution reads their config.json);
``served_model_name`` keeps the argv's value. The draft's class is then resolved as SGLang's start-up does (draft.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimi_serve.core.family import DEFAULT, by_model_name
from kimi_serve.sglang.platform import SM120_FACTS
from kimi_serve.simulator.draft import DraftClass, check_declared, resolve_draft
from kimi_serve.simulator.stand_in import STANDIN_DRAFT, standin_model

logger = logging.getLogger("kimi_serve.simulator")


@dataclass
class SimulatedArgs:
    server_args: Any  # sglang ServerArgs, resolved and published
    model_path: str  # as given in the argv (what /model_info reports)
    tokenizer_dir: Path | None  # a real directory that may hold the model's tokenizer
    notes: list[str] = field(default_factory=list)  # what was substituted, for the log and /server_info
    draft: DraftClass | None = None  # the draft's class as SGLang resolved it (draft.py); None without a draft
    family: str = DEFAULT  # the Kimi family served (core/family.py), from the served name or the model path


def _is_model_dir(path: str | None) -> bool:
    return path is not None and bool(path) and (Path(path) / "config.json").is_file()


def resolve(argv: list[str]) -> SimulatedArgs:
    from sglang.srt.parser.template_detection import resolve_auto_parsers
    from sglang.srt.runtime_context import override_platform, publish
    from sglang.srt.server_args import prepare_server_args

    sa = prepare_server_args(argv)
    notes: list[str] = []
    model_path = sa.model_path
    if sa.served_model_name is None:
        sa.served_model_name = model_path  # SGLang's default, kept although the path below may change
    tokenizer_dir: Path | None = Path(model_path) if Path(model_path).is_dir() else None
    named = by_model_name(str(sa.served_model_name)) or by_model_name(model_path)
    family = named.name if named is not None else DEFAULT
    if not _is_model_dir(model_path):
        sa.model_path = str(standin_model(family))
        notes.append(
            f"model path {model_path} has no config.json here: using the stand-in config-only"
            f" {named.title if named else 'Kimi-K2.5'} directory {sa.model_path}"
        )
    if sa.tokenizer_path is not None:
        if Path(sa.tokenizer_path).is_dir():
            tokenizer_dir = Path(sa.tokenizer_path)
        else:
            notes.append(f"tokenizer path {sa.tokenizer_path} does not exist here: ignored")
            sa.tokenizer_path = None
    draft = sa.speculative_draft_model_path
    if draft and not _is_model_dir(draft):
        sa.speculative_draft_model_path = str(STANDIN_DRAFT)
        notes.append(
            f"draft model path {draft} has no config.json here: using the stand-in config-only EAGLE-3 MLA draft"
            f" (Eagle3DeepseekV2ForCausalLM, the class of prod's kimi-k2.5-eagle3-mla) directory {STANDIN_DRAFT}"
        )
    if sa.speculative_draft_model_path:
        check_declared(sa.speculative_draft_model_path)  # before SGLang's own reading fails on it with an IndexError
    if sa.device is None:
        sa.device = "cuda"  # the simulated platform; auto-detection on this host would find no accelerator
    with override_platform(**SM120_FACTS):
        sa.resolve_once()
        sa.check_server_args()
        resolve_auto_parsers(sa)
    publish(sa, role="tokenizer")
    with override_platform(**SM120_FACTS):  # the draft as SGLang's start-up resolves it (KimiServeError: refused)
        draft_class = resolve_draft(sa)
    return SimulatedArgs(
        server_args=sa,
        model_path=model_path,
        tokenizer_dir=tokenizer_dir,
        notes=notes,
        draft=draft_class,
        family=family,
    )
