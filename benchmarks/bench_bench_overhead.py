"""Does `kimi-serve bench` report what a bare `python -m sglang.bench_serving` reports on the same server?

Starts one simulator (`--profile sim`, the performance model's clock), then alternates: a bench cell (through
`kimi_serve.bench.run_bench` with `--host` twice on that server) and a bare bench_serving run with the same flags,
ROUNDS times. Prints each run's output tok/s and p99 ITL and the difference of the means (target: within 3%).
The numbers are the simulator's MODEL numbers (not measurements); the comparison is what matters.

    KIMI_SERVE_SGLANG_PYTHON=... .venv/bin/python benchmarks/bench_bench_overhead.py [CONCURRENCY [REQUESTS [ROUNDS]]]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import mean

from kimi_serve.bench import BenchOptions, loadgen, run_bench
from kimi_serve.bench.sweep import _standin_tokenizer
from kimi_serve.bench.workload import prepare
from kimi_serve.check.launch import launch_for
from kimi_serve.profile.loader import load_profile
from kimi_serve.sglang.site import require_sglang_python
from kimi_serve.simulator import launcher


def bare(python: str, endpoint: loadgen.BenchEndpoint, workload, concurrency: int, requests: int, out: Path) -> dict:
    result = out / "bare.jsonl"
    result.unlink(missing_ok=True)
    argv = loadgen.command(python, endpoint, workload, concurrency, requests, result, seed=0)
    subprocess.run(
        argv,
        env=loadgen.environment(os.environ, endpoint),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return json.loads(result.read_text().splitlines()[-1])


def main(argv: list[str]) -> int:
    concurrency = int(argv[0]) if argv else 16
    requests = int(argv[1]) if len(argv) > 1 else 32
    rounds = int(argv[2]) if len(argv) > 2 else 2
    python = require_sglang_python(None)
    work = Path(tempfile.mkdtemp(prefix="kimi-serve-bench-overhead-"))
    launch = launch_for(load_profile("sim"))
    port = launcher.free_port()
    args = launcher.with_flag(launcher.with_flag(list(launch.server_args), "--host", "127.0.0.1"), "--port", str(port))
    sim = launcher.Simulator.start(
        launcher.command(python, args), launcher.environment(warmup=0.5), f"http://127.0.0.1:{port}", work / "sim.log"
    )
    rows: list[tuple[str, float, float]] = []
    try:
        sim.wait_ready(300)
        endpoint = loadgen.BenchEndpoint(sim.base_url, "kimi-k2.5", None, _standin_tokenizer(work, python))
        workload = prepare("random", requests, work)
        for i in range(rounds):
            out = work / f"bench-{i}"
            opts = BenchOptions(
                profile=f"bench-a{i}",
                against=f"bench-b{i}",
                concurrency=[concurrency],
                requests=requests,
                workload="random",
                repeat=1,
                out=out,
                profiles=(None, None),  # labels of a running server
                hosts=[sim.base_url, sim.base_url],
            )
            shutil.copytree(work / "tokenizer-standin", out / "tokenizer-standin")
            report = run_bench(opts, lambda line: None)
            for name in (opts.profile, opts.against):
                s = report["results"][name][str(concurrency)]
                rows.append(("bench", s["output_tok_s"]["mean"], s["itl_p99_ms"]["mean"]))
                b = bare(python, endpoint, workload, concurrency, requests, work)
                rows.append(("bare", b["output_throughput"], b["p99_itl_ms"]))
    finally:
        sim.stop()
    print(
        f"simulator MODEL numbers (not measurements); concurrency {concurrency}, {requests} requests, random 1024/256"
    )
    print(f"{'run':<6} {'out tok/s':>10} {'p99 ITL ms':>11}")
    for kind, tok_s, itl in rows:
        print(f"{kind:<6} {tok_s:10.1f} {itl:11.2f}")
    a = mean(r[1] for r in rows if r[0] == "bench")
    b = mean(r[1] for r in rows if r[0] == "bare")
    diff = 100 * (a - b) / b
    print(f"mean out tok/s: bench {a:.1f}, bare {b:.1f}: {diff:+.2f}% ({'within' if abs(diff) <= 3 else 'OUTSIDE'} 3%)")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
