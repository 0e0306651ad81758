"""How long `kimi-serve verify` takes against a server that delays every chat answer by D seconds.

Uses the contract stand-in server (tests/contract_server.py; not SGLang). Probes run concurrently, at most 8
requests at once (verify.runner.CONNECTIONS), so the wall time should be about the slowest probe plus a little (the
tool loop's two turns: 2 D), or the sum of the probe latencies over 8 when that is longer (full: four rounds of D),
never the sum. Prints one row per suite and D: the wall time against the slowest probe.

    .venv/bin/python benchmarks/bench_verify.py [D ...]
    .venv/bin/python benchmarks/bench_verify.py --host HOST:PORT   # a running server (e.g. `kimi-serve simulate`)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from contract_server import ContractServer

from kimi_serve.verify import VerifyReport, run_verify


def _row(suite: str, delay: float, report: VerifyReport, wall: float) -> str:
    total = sum(p.latency_s for p in report.probes)
    slowest = max(report.probes, key=lambda p: p.latency_s)
    return (
        f"{suite:<6} {delay:6.2f} {len(report.probes):6d} {wall:9.3f} {slowest.latency_s:12.3f} "
        f"{wall / slowest.latency_s:13.2f} {total:14.3f} {total / wall:9.2f}  ({slowest.probe} {slowest.mode})"
    )


def main(argv: list[str]) -> int:
    print(
        f"{'suite':<6} {'D (s)':>6} {'probes':>6} {'wall (s)':>9} {'slowest (s)':>12} {'wall/slowest':>13} "
        f"{'sum probe (s)':>14} {'sum/wall':>9}"
    )
    if argv[:1] == ["--host"]:  # a real server: D is whatever it takes
        for suite in ("quick", "full"):
            start = time.monotonic()
            report = run_verify(argv[1], suite=suite, timeout=300)
            print(_row(suite, 0.0, report, time.monotonic() - start), f"exit {report.exit_code}")
        return 0
    delays = [float(a) for a in argv] or [0.0, 0.25, 0.5, 1.0, 2.0]
    for suite in ("quick", "full"):
        for delay in delays:
            with ContractServer(delay=delay) as srv:
                start = time.monotonic()
                report = run_verify(srv.host, suite=suite, timeout=60)
                wall = time.monotonic() - start
            assert report.exit_code == 0, report.to_json()
            print(_row(suite, delay, report, wall))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
