"""How long `kimi-serve verify` takes against a server that delays every chat answer by D seconds.

Uses the contract stand-in server (tests/contract_server.py; not SGLang). Probes run concurrently, so the wall time
should be about D plus a little, not the sum of the probe latencies. Prints one row per suite and D.

    .venv/bin/python benchmarks/bench_verify.py [D ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from contract_server import ContractServer

from kimi_serve.verify import run_verify


def main(argv: list[str]) -> int:
    delays = [float(a) for a in argv] or [0.0, 0.25, 0.5, 1.0, 2.0]
    print(
        f"{'suite':<6} {'D (s)':>6} {'probes':>6} {'wall (s)':>9} {'sum probe (s)':>14} {'wall/D':>7} {'sum/wall':>9}"
    )
    for suite in ("quick", "full"):
        for delay in delays:
            with ContractServer(delay=delay) as srv:
                start = time.monotonic()
                report = run_verify(srv.host, suite=suite, timeout=60)
                wall = time.monotonic() - start
            assert report.exit_code == 0, report.to_json()
            total = sum(p.latency_s for p in report.probes)
            per_d = f"{wall / delay:7.2f}" if delay else f"{'-':>7}"
            print(
                f"{suite:<6} {delay:6.2f} {len(report.probes):6d} {wall:9.3f} {total:14.3f} {per_d} {total / wall:9.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
