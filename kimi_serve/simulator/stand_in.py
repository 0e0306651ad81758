"""The stand-in model folders shipped in ``assets/``: config-only Kimi-K2.5 and EAGLE-3 draft directories (SGLang's
resolution reads only ``config.json``), the stand-in tokenizer and Kimi's chat template; the one home for their paths
(the simulator and `check`'s SGLang tier substitute them for model directories absent on this host). The draft is
shaped as prod's ``kimi-k2.5-eagle3-mla``. Each family (core/family.py, docs/families.md) has its stand-in config and
its form of the template's history rule. Standard library only.
"""

from __future__ import annotations

from pathlib import Path

from kimi_serve.core.family import K25, K26, K27_CODE

ASSETS = Path(__file__).resolve().parent / "assets"
STANDIN_MODEL = ASSETS / "kimi-k25"
STANDIN_DRAFT = ASSETS / "eagle3-mla"  # Eagle3DeepseekV2ForCausalLM, the class of prod's kimi-k2.5-eagle3-mla
STANDIN_TOKENIZER = ASSETS / "standin-bpe.json"
CHAT_TEMPLATE = ASSETS / "chat_template.jinja"
_MODELS = {K25: STANDIN_MODEL, K26: ASSETS / "kimi-k26", K27_CODE: ASSETS / "kimi-k26"}

# The K2.5 template's two family-dependent tests, and each family's form of them.
_HISTORY = "loop.index0 <= ns.last"  # an assistant turn whose reasoning the prompt drops
_INSTANT = "thinking is defined and thinking is false"  # instant mode asked for
_FORMS = {
    K26: {_HISTORY: f"({_HISTORY} and not (preserve_thinking is defined and preserve_thinking))"},
    K27_CODE: {
        _HISTORY: f"({_HISTORY} and preserve_thinking is defined and preserve_thinking is false)",
        _INSTANT: "false",
    },
}


def standin_model(family: str) -> Path:
    """The config-only model directory standing in for ``family``'s checkpoint."""
    return _MODELS.get(family, STANDIN_MODEL)


def chat_template(family: str = K25) -> str:
    """The stand-in chat template as ``family`` renders it."""
    text = CHAT_TEMPLATE.read_text(encoding="utf-8")
    for old, new in _FORMS.get(family, {}).items():
        assert old in text, f"stand-in template lacks {old!r}"
        text = text.replace(old, new)
    return text
