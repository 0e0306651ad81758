#!/usr/bin/env python3
"""What resolving the draft's class adds to every simulator start (`check --contract`, `simulate`), and why only the
modules that name the class are imported (kimi_serve/simulator/draft.py).

Each sample is a fresh SGLang interpreter that first imports what the simulator imports anyway (server args, the
OpenAI serving layer, ModelConfig), then measures one of:
- targeted: ``registered_class(CLASS)``: the model sources searched for the name, the one module imported;
- registry: ``from sglang.srt.models.registry import ModelRegistry`` (every model module, ~290) + the lookup.
Prints the median CPU and wall seconds of each (samples interleaved, so a shared machine's load falls on both), and
the load average. Goal: the targeted lookup well under 10% of `check --profile prod --offline --contract`
(benchmarks/bench_check_contract.py).

Run: KIMI_SERVE_SGLANG_PYTHON=... .venv/bin/python benchmarks/bench_draft_resolution.py [--runs N] [--cls NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SAMPLE = r"""
import json, sys, time
import sglang.srt.server_args, sglang.srt.entrypoints.openai.serving_chat, sglang.srt.configs.model_config
cls = sys.argv[2]
cpu, wall = time.process_time(), time.perf_counter()
if sys.argv[1] == "targeted":
    from kimi_serve.simulator.draft import registered_class
    found = registered_class(cls)
    ok = found is not None
else:
    from sglang.srt.models.registry import ModelRegistry
    ok = ModelRegistry.models.get(cls) is not None
print(json.dumps({"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall, "found": ok}))
"""


def sample(python: str, how: str, cls: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [python, "-P", "-c", SAMPLE, how, cls], capture_output=True, text=True, env=env, check=False, timeout=600
    )
    if done.returncode != 0:
        sys.exit(f"{how}: exit {done.returncode}: {done.stderr[-500:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    if not result["found"]:
        sys.exit(f"{how}: {cls} not found")
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cls", default="Eagle3DeepseekV2ForCausalLM")
    args = parser.parse_args()
    python = os.environ.get("KIMI_SERVE_SGLANG_PYTHON")
    if not python:
        sys.exit("set KIMI_SERVE_SGLANG_PYTHON to the CPU SGLang venv's python (scripts/build-cpu-venv.sh)")
    load = os.getloadavg()[0]
    samples: dict[str, list[dict[str, float]]] = {"targeted": [], "registry": []}
    for _ in range(args.runs):
        for how, seen in samples.items():
            seen.append(sample(python, how, args.cls))
    for how, seen in samples.items():
        cpu = statistics.median(s["cpu"] for s in seen)
        wall = statistics.median(s["wall"] for s in seen)
        print(f"{how:9s} {args.cls}: cpu {cpu:.2f} s, wall {wall:.2f} s (median of {args.runs})")
    print(f"load average at start: {load:.1f} ({os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
