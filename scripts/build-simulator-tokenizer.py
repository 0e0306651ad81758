"""Rebuild kimi_serve/simulator/assets/standin-bpe.json: the byte-level BPE merges of the simulator's stand-in
tokenizer.

The stand-in is NOT Kimi's tokenizer (a 163584-rank tiktoken BPE); it only has to cut text into plausible,
multi-character tokens. kimi_serve/simulator/tokenizer.py pads this small vocabulary to Kimi's 163584 base ranks and
adds Kimi's special tokens at their real ids. Run in the CPU SGLang venv (needs `tokenizers`):
    "$(scripts/build-cpu-venv.sh)" scripts/build-simulator-tokenizer.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kimi_serve.simulator import model  # noqa: E402

OUT = ROOT / "kimi_serve" / "simulator" / "assets" / "standin-bpe.json"
VOCAB_SIZE = 4096

ENGLISH = """
The user asks a question and the assistant answers it. Let me check the workspace first, then I will read the file
and summarize what it contains. I need to find the files that match the pattern, list the directories, search the
code for the function, run the tests, and report the result. What is the weather in Paris, London, Tokyo, Berlin or
New York today? Please write a short note, create a file, update the configuration, fix the bug, explain the error.
This is a simple test of the tokenizer: numbers 0 1 2 3 4 5 6 7 8 9 10 42 100 2024, symbols ( ) [ ] { } < > = + - * /
and JSON such as {"pattern": "*/", "path": ".", "city": "Paris", "unit": "celsius", "query": "hello world"}.
def main(argv): return 0  # Python code; import os, sys, json; for item in items: print(item)
"""


def corpus() -> list[str]:
    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
    prompts = [
        "What is the weather in Paris?",
        "List top-level dirs",
        "What is 2+2?",
        "Write at least 200 characters about the sea",
    ]
    texts = [ENGLISH * 20]
    for p in prompts:
        for tools in ([], [weather]):
            for thinking in (True, False):
                texts.append(model.generate(model.Turn([{"role": "user", "content": p}], tools, "auto", thinking)))
    return texts


def main() -> int:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    spec = json.loads(tok.to_str())["model"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["merges"]]
    OUT.write_text(json.dumps({"vocab": spec["vocab"], "merges": merges}, ensure_ascii=False, separators=(",", ":")))
    print(f"{OUT}: {len(spec['vocab'])} tokens, {len(merges)} merges")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
