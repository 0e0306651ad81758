"""The stand-in model folders shipped in ``assets/``: config-only Kimi-K2.5 and EAGLE-3 draft directories (SGLang's
resolution reads only ``config.json``), the stand-in tokenizer and Kimi's chat template. The draft is shaped as prod's
(``kimi-k2.5-eagle3-mla``: ``Eagle3DeepseekV2ForCausalLM``, one layer of the target's multi-latent attention), so
SGLang resolves the class prod's start loads. The one home for their paths:
the simulator and `check`'s SGLang tier both substitute them for model directories absent on this host.
Standard library only.
"""

from __future__ import annotations

from pathlib import Path

ASSETS = Path(__file__).resolve().parent / "assets"
STANDIN_MODEL = ASSETS / "kimi-k25"
STANDIN_DRAFT = ASSETS / "eagle3-mla"  # Eagle3DeepseekV2ForCausalLM, the class of prod's kimi-k2.5-eagle3-mla
STANDIN_TOKENIZER = ASSETS / "standin-bpe.json"
CHAT_TEMPLATE = ASSETS / "chat_template.jinja"
