"""The Kimi family as data: one row per model kimi-serve knows, the one home of each model's facts (docs/families.md).

What a profile (`model.family`), `check`, the simulator, `verify` and `client-config` ask of a model: its
``config.json`` identity (architecture, model_type, eos_token_id), SGLang's parsers, the ids a turn stops on, the
thinking modes and the chat-template switches, the sampling its vendor accepts, the context, the EAGLE-3 drafts made
for it (with their published acceptance), and the checkpoint's size. Pure data, standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

K25, K26, K27_CODE, K3 = "kimi-k2.5", "kimi-k2.6", "kimi-k2.7-code", "kimi-k3"
DEFAULT = K25
EOS_ID, IM_END_ID = 163585, 163586  # [EOS] (K2.5's config.json) and <|im_end|> (every K2.x turn's end)
THINKING, INSTANT = "thinking", "instant"
GPU_BYTES = 96_000_000_000  # one RTX PRO 6000 Blackwell: 96 GB


@dataclass(frozen=True)
class Draft:
    repo: str  # the Hugging Face repository; its last part is the directory name profiles use
    # published mean accepted tokens per step (topk 1, 3 steps), lowest..highest workload; None: none published
    acceptance: tuple[float, float] | None
    source: str = ""  # where the figure was published

    @property
    def name(self) -> str:
        return self.repo.rsplit("/", 1)[-1].lower()


@dataclass(frozen=True)
class ModelFamily:
    name: str  # the profile's model.family
    title: str  # as Moonshot names it
    repo: str
    architecture: str  # config.json architectures[0]
    model_type: str  # config.json model_type
    parsers: str  # SGLang's --tool-call-parser and --reasoning-parser
    eos_ids: tuple[int, ...]  # ids a turn may stop on (config.json + generation_config.json), the first the main one
    modes: tuple[str, ...]  # thinking modes the model has
    context: int  # tokens
    checkpoint_bytes: int  # the smallest official checkpoint
    switches: tuple[str, ...] = ()  # chat_template_kwargs the template reads
    forced: tuple[tuple[str, bool], ...] = ()  # switches the model fixes (a profile may not set them otherwise)
    sampling: tuple[tuple[str, float], ...] = ()  # the only sampling its vendor accepts (empty: any)
    recommended: tuple[tuple[str, float], ...] = ()  # the vendor's advice per mode: (mode.param, value)
    drafts: tuple[Draft, ...] = ()
    tool_schema_accuracy: float | None = None  # published share of schema-valid tool calls on SGLang (K2VV)

    @property
    def thinking_only(self) -> bool:
        return INSTANT not in self.modes

    @property
    def stop_id(self) -> int:
        return self.eos_ids[0]


def gb(n: int) -> str:
    return f"{n / 1e12:.2f} TB" if n >= 1e12 else f"{n / 1e9:.0f} GB"


_K25_DRAFTS = (
    Draft("lightseekorg/kimi-k2.5-eagle3-mla", (2.597, 3.139), "model card, lm_eval (MMStar..AIME)"),
    Draft("lightseekorg/kimi-k2.5-eagle3", (2.295, 3.809), "model card, SpecForge bench (CEval..BFCL multiple)"),
    Draft("AQ-MedAI/Kimi-K25-eagle3", None, "acceptance rate 51.78% on GSM8K with 4 tokens (vLLM), no length"),
)
_K26_DRAFTS = (
    Draft("lightseekorg/kimi-k2.6-eagle3.1-mla", (2.26, 2.95), "tokenspeed PR #795 on K2.7-Code, by category"),
    Draft("lightseekorg/kimi-k2.6-eagle3-mla", None),
    Draft("lightseekorg/kimi-k2.6-eagle3", None),
    Draft("nvidia/Kimi-K2.6-Eagle3", None),
)
_K2X = {
    "architecture": "KimiK25ForConditionalGeneration",
    "model_type": "kimi_k25",
    "parsers": "kimi_k2",
    "context": 262_144,
    "checkpoint_bytes": 595_000_000_000,
}

FAMILIES: dict[str, ModelFamily] = {
    K25: ModelFamily(
        K25,
        "Kimi-K2.5",
        "moonshotai/Kimi-K2.5",
        eos_ids=(IM_END_ID, EOS_ID),
        modes=(THINKING, INSTANT),
        switches=("thinking",),
        recommended=(("thinking.temperature", 1.0), ("instant.temperature", 0.6), ("thinking.top_p", 0.95)),
        drafts=_K25_DRAFTS,
        **_K2X,  # type: ignore[arg-type]
    ),
    K26: ModelFamily(
        K26,
        "Kimi-K2.6",
        "moonshotai/Kimi-K2.6",
        eos_ids=(IM_END_ID,),
        modes=(THINKING, INSTANT),
        switches=("thinking", "preserve_thinking"),
        recommended=(("thinking.temperature", 1.0), ("instant.temperature", 0.6), ("thinking.top_p", 0.95)),
        # the K2.5 MLA draft also runs on K2.6 (acceptance rate 0.31-0.47 measured, not a length)
        drafts=(*_K26_DRAFTS, Draft("lightseekorg/kimi-k2.5-eagle3-mla", None, "on K2.6: rate 0.31-0.47")),
        tool_schema_accuracy=0.896,
        **_K2X,  # type: ignore[arg-type]
    ),
    K27_CODE: ModelFamily(
        K27_CODE,
        "Kimi-K2.7-Code",
        "moonshotai/Kimi-K2.7-Code",
        eos_ids=(IM_END_ID,),
        modes=(THINKING,),
        switches=("thinking", "preserve_thinking"),
        forced=(("preserve_thinking", True),),  # thinking itself: modes (no instant)
        sampling=(("temperature", 1.0), ("top_p", 0.95)),
        recommended=(("thinking.temperature", 1.0), ("thinking.top_p", 0.95)),
        drafts=_K26_DRAFTS,  # K2.7-Code runs K2.6's drafts
        **_K2X,  # type: ignore[arg-type]
    ),
    K3: ModelFamily(
        K3,
        "Kimi-K3",
        "moonshotai/Kimi-K3",
        architecture="KimiK3ForConditionalGeneration",
        model_type="kimi_k3",
        parsers="kimi_k3",
        eos_ids=(),
        modes=(THINKING,),
        context=1_048_576,
        checkpoint_bytes=1_560_000_000_000,  # MXFP4, 96 shards
    ),
}
NAMES = tuple(FAMILIES)


def family(name: str | None) -> ModelFamily:
    """The family of a profile's ``model.family`` (None: the default, Kimi-K2.5)."""
    return FAMILIES[name or DEFAULT]


def by_identity(architectures: object, model_type: object) -> ModelFamily | None:
    """The family a checkpoint's config.json names (K2.5, K2.6 and K2.7-Code share one identity: the first of them)."""
    archs = architectures if isinstance(architectures, list) else []
    by_arch = (f for f in FAMILIES.values() if f.architecture in archs)
    return next(by_arch, None) or next((f for f in FAMILIES.values() if f.model_type == model_type), None)


def by_model_name(name: str) -> ModelFamily | None:
    """The family a served model name or path spells (``kimi-k2.6``, ``/models/Kimi-K2.7-Code``), None if none does."""
    low = name.lower().replace("_", "-")
    for key in (K27_CODE, K26, K3, K25):  # the longest first: kimi-k2.7-code before anything shorter
        if key in low or key.replace("kimi-", "kimi") in low:
            return FAMILIES[key]
    return None


def draft_family(draft_path: str) -> ModelFamily | None:
    """The family a draft directory's name says it was made for (``kimi-k2.6-eagle3.1-mla``: K2.6), None if none."""
    base = draft_path.rstrip("/").rsplit("/", 1)[-1].lower()
    for key, spellings in ((K27_CODE, ("k2.7", "k27")), (K26, ("k2.6", "k26")), (K25, ("k2.5", "k25"))):
        if any(s in base for s in spellings):
            return FAMILIES[key]
    return None


def accepts_draft(fam: ModelFamily, draft_path: str) -> bool:
    """Whether ``fam`` runs a draft of this name: one made for it, one of its listed drafts, or one no family claims."""
    base = draft_path.rstrip("/").rsplit("/", 1)[-1].lower()
    made_for = draft_family(draft_path)
    return made_for is None or made_for is fam or any(d.name == base for d in fam.drafts)
