"""The stand-in model folders shipped in ``assets/``: config-only Kimi-K2.5 and EAGLE-3 draft directories (SGLang's
resolution reads only ``config.json``), the stand-in tokenizer and Kimi's chat template. The one home for their paths:
the simulator and `check`'s SGLang tier both substitute them for model directories absent on this host.
Standard library only.
"""

from __future__ import annotations

from pathlib import Path

ASSETS = Path(__file__).resolve().parent / "assets"
STANDIN_MODEL = ASSETS / "kimi-k25"
STANDIN_DRAFT = ASSETS / "eagle3"
STANDIN_TOKENIZER = ASSETS / "standin-bpe.json"
CHAT_TEMPLATE = ASSETS / "chat_template.jinja"
