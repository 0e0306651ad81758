#!/usr/bin/env python3
"""`check --contract` (the CI smoke test before every restart) against importing SGLang's serving layer alone.

Prints two numbers, warm (each command runs once unmeasured first, then the median of --runs, the two commands
interleaved so a shared machine's load falls on both):
- import: the CPU SGLang interpreter importing what the simulator imports (server args, the OpenAI serving layer,
  parsers, auth, uvicorn): the floor for anything that runs SGLang's own code;
- check: `kimi-serve check --profile PROFILE --offline --contract` (SGLang's parser tier and the simulator start side
  by side, then the verify suite at `up`'s pacing).
Goal (issue 12): check within 1.5x of import. The machine is often shared: report what you measured, and the load.

Run: KIMI_SERVE_SGLANG_PYTHON=... .venv/bin/python benchmarks/bench_check_contract.py [--runs N] [--profile prod]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

SERVING_LAYER = (
    "import sglang.srt.server_args, sglang.srt.entrypoints.openai.serving_chat, "
    "sglang.srt.entrypoints.openai.protocol, sglang.srt.parser.template_manager, "
    "sglang.srt.utils.auth, uvicorn, fastapi"
)


def timed(commands: list[list[str]], runs: int) -> list[float]:
    """Median seconds of each command; samples interleaved (a, b, a, b, ...) so a shared machine's load hits both."""
    for argv in commands:  # warm the caches
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    samples: list[list[float]] = [[] for _ in commands]
    for _ in range(runs):
        for argv, seen in zip(commands, samples, strict=True):
            t0 = time.perf_counter()
            done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
            seen.append(time.perf_counter() - t0)
            if done.returncode != 0:
                sys.exit(f"{argv[:4]}... exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return [statistics.median(s) for s in samples]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", default="prod")
    args = parser.parse_args()
    python = os.environ.get("KIMI_SERVE_SGLANG_PYTHON")
    if not python:
        sys.exit("set KIMI_SERVE_SGLANG_PYTHON to the CPU SGLang venv's python (scripts/build-cpu-venv.sh)")
    load = os.getloadavg()[0]
    imported, check = timed(
        [
            [python, "-c", SERVING_LAYER],
            [
                sys.executable,
                "-m",
                "kimi_serve",
                "check",
                "--profile",
                args.profile,
                "--offline",
                "--contract",
                "--json",
            ],
        ],
        args.runs,
    )
    print(f"import SGLang's serving layer alone: {imported:.2f} s (median of {args.runs}, warm)")
    print(f"check --profile {args.profile} --offline --contract: {check:.2f} s (median of {args.runs}, warm)")
    print(f"ratio: {check / imported:.2f}x (goal <= 1.5x); load average at start {load:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
