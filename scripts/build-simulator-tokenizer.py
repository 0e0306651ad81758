"""Rebuild kimi_serve/simulator/assets/standin-bpe.json: the byte-level BPE merges of the simulator's stand-in
tokenizer.

The stand-in is NOT Kimi's tokenizer (a 163584-rank tiktoken BPE); it has to cut text about as finely as Kimi's does,
so that token counts (usage, context limits, the budget a client asks for) come out near a real server's.
kimi_serve/simulator/tokenizer.py pads this vocabulary to Kimi's 163584 base ranks and adds Kimi's special tokens at
their real ids. The merges are learnt over the project's own text, which it ships: its docs (English prose), its
Python sources, scripts, configurations and patches (code), its JSON data (compact and indented), and the scripted
model's own answers; the clients' captured prompts under tests/clients/ are left out, to measure on
(benchmarks/bench_standin_tokenizer.py).
Run in the CPU SGLang venv (needs `tokenizers`):
    "$(scripts/build-cpu-venv.sh | tail -n1)" scripts/build-simulator-tokenizer.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kimi_serve.simulator import model  # noqa: E402
from kimi_serve.simulator.stand_in import STANDIN_TOKENIZER  # noqa: E402
from kimi_serve.simulator.tokenizer import standin_pre_tokenizer  # noqa: E402

# 500 KB of JSON (~210 KB in the wheel): >= 3.5 chars/token on prose, code and JSON (16384: 3.46 on the JS driver)
VOCAB_SIZE = 20480


def corpus() -> list[str]:
    package = ROOT / "kimi_serve"
    texts = [p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]]
    texts += [p.read_text(encoding="utf-8") for p in sorted(package.rglob("*.py"))]
    for folder in ("scripts", "configs", "patches", "systemd"):  # shell, YAML, diffs, unit files
        texts += [p.read_text(encoding="utf-8") for p in sorted((ROOT / folder).rglob("*")) if p.is_file()]
    for path in sorted(package.rglob("*.json")):
        if path == STANDIN_TOKENIZER:
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        texts += [json.dumps(data, separators=(",", ":"), ensure_ascii=False), json.dumps(data, indent=2)]
    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
    for prompt in ("What is the weather in Paris?", "List top-level dirs", "What is 2+2?", "Read README.md"):
        for tools in ([], [weather]):
            for thinking in (True, False):
                turn = model.Turn([{"role": "user", "content": prompt}], tools, "auto", thinking)
                texts.append(model.generate(turn))
    return texts


def main() -> int:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = standin_pre_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    spec = json.loads(tok.to_str())["model"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["merges"]]
    STANDIN_TOKENIZER.write_text(
        json.dumps({"vocab": spec["vocab"], "merges": merges}, ensure_ascii=False, separators=(",", ":"))
    )
    print(f"{STANDIN_TOKENIZER}: {len(spec['vocab'])} tokens, {len(merges)} merges")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
