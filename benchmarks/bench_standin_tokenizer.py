#!/usr/bin/env python3
"""Characters per token of the simulator's stand-in tokenizer on the clients' real prompts (text it was not built from).

- kimi-cli: kimi-cli 1.51.0's real 15-tool request (tests/clients/kimi_cli_request.json), rendered by the stand-in's
  chat template as the simulator renders it (tools as compact JSON);
- opencode: opencode's real tool schemas (tests/clients/opencode_tools.json) with "List the files in this directory";
- prose: the tool descriptions of both (English); json: both tool lists as compact JSON; code: the tier's Python and
  TypeScript client drivers (tests/clients/py_clients.py, ai_sdk.mjs).
kimi-cli's own estimate for Kimi's tokenizer comes to ~3.8 characters per token on its prompt (12,882 tokens).

Run: PYTHONPATH=. $KIMI_SERVE_SGLANG_PYTHON benchmarks/bench_standin_tokenizer.py
"""

from __future__ import annotations

import json
import time
from pathlib import Path

CLIENTS = Path(__file__).resolve().parent.parent / "tests" / "clients"


def main() -> int:
    from kimi_serve.simulator.tokenizer import build_standin

    start = time.perf_counter()
    tok = build_standin()
    print(f"build_standin: {time.perf_counter() - start:.2f} s")
    kimi_cli = json.loads((CLIENTS / "kimi_cli_request.json").read_text())
    opencode = json.loads((CLIENTS / "opencode_tools.json").read_text())["tools"]
    listing = [{"role": "user", "content": "List the files in this directory"}]
    tools = kimi_cli["tools"] + opencode
    texts = {
        "kimi-cli prompt": tok.apply_chat_template(
            kimi_cli["messages"], tools=kimi_cli["tools"], tokenize=False, add_generation_prompt=True
        ),
        "opencode prompt": tok.apply_chat_template(listing, tools=opencode, tokenize=False, add_generation_prompt=True),
        "prose (tool descriptions)": "\n".join(t["function"]["description"] for t in tools),
        "json (tool lists)": json.dumps(tools, separators=(",", ":")),
        "code (py_clients.py)": (CLIENTS / "py_clients.py").read_text(),
        "code (ai_sdk.mjs)": (CLIENTS / "ai_sdk.mjs").read_text(),
    }
    for name, text in texts.items():
        n = len(tok.encode(text, add_special_tokens=False))
        print(f"{name:28} {len(text):7} chars {n:6} tokens {len(text) / n:5.2f} chars/token")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
