#!/usr/bin/env python3
"""The test suite's tier timings: run each tier through scripts/test.sh (the same workers and setup as CI) and print
its wall time, its test count and share, and its slowest tests, so a slow test is found before CI finds it.

Usage: benchmarks/bench_test_tiers.py [--tier fast|sglang|systemd|engine|crash|all ...] [--top N] [--junit DIR]
  default: fast, then the slow tiers one by one (sglang, systemd, engine, crash): about the whole suite's time.
  --tier all  the whole suite in one run (what CI runs; compare with the sum of the tiers).
  --junit DIR keep each run's JUnit XML there; --from DIR summarise earlier runs instead of running.
Targets (docs/testing.md): fast <= 120 s with >= 75% of the tests; all <= 20 minutes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TIERS = {
    "fast": ["--fast"],
    "sglang": ["--tier", "sglang"],
    "systemd": ["--tier", "systemd"],
    "engine": ["--tier", "engine"],
    "crash": ["--tier", "crash"],
    "all": [],
}


def run_tier(name: str, junit: Path) -> float:
    argv = [str(REPO / "scripts" / "test.sh"), *TIERS[name], "-q", f"--junitxml={junit}"]
    started = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    if done.returncode not in (0, 1):
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        sys.exit(f"bench_test_tiers: the {name} tier did not run (exit {done.returncode}):\n" + "\n".join(tail))
    return wall


def summarise(junit: Path) -> tuple[int, int, float, list[tuple[float, str]], list[tuple[float, str]]]:
    """(tests, failed, summed test seconds, slowest tests, hungriest tests by CPU seconds) of a JUnit XML file.

    CPU seconds are each test's ``cpu_s`` property (tests/conftest.py: its worker's CPU time and that of the
    processes it waited for, a pooled server counted at the test that ends the session)."""
    cases, cpu = [], []
    failed = 0
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        cases.append((float(case.get("time") or 0.0), name))
        for prop in case.iter("property"):
            if prop.get("name") == "cpu_s":
                cpu.append((float(prop.get("value") or 0.0), name))
        failed += any(child.tag in ("failure", "error") for child in case)
    return len(cases), failed, sum(t for t, _ in cases), sorted(cases, reverse=True), sorted(cpu, reverse=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tier", action="append", choices=sorted(TIERS))
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--junit", type=Path, help="keep the JUnit XML files here")
    ap.add_argument("--from", dest="source", type=Path, help="summarise TIER.xml files written earlier by --junit")
    args = ap.parse_args()
    tiers = args.tier or ["fast", "sglang", "systemd", "engine", "crash"]
    out_dir = args.source or args.junit or Path(tempfile.mkdtemp(prefix="kimi-serve-tiers-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    workers = os.environ.get("KIMI_SERVE_TEST_WORKERS", "4 (scripts/test.sh's default)")
    print(f"kimi-serve test tiers: {os.cpu_count()} cores, xdist workers {workers}")
    rows = []
    for name in tiers:
        junit = out_dir / f"{name}.xml"
        wall = float("nan") if args.source else run_tier(name, junit)
        count, failed, summed, slowest, hungriest = summarise(junit)
        rows.append((name, wall, count, failed, summed, slowest, hungriest))
    total = sum(r[2] for r in rows if r[0] != "all") or 1
    cores = os.cpu_count() or 1
    print(
        f"{'tier':8} {'wall s':>8} {'tests':>6} {'share':>6} {'failed':>6} {'test-s':>8} {'parallelism':>11} "
        f"{'cpu s':>8} {'cpu floor s':>11}"
    )
    for name, wall, count, failed, summed, _, hungriest in rows:
        share = "" if name == "all" else f"{100 * count / total:5.1f}%"
        cpu = sum(c for c, _ in hungriest)
        print(
            f"{name:8} {wall:8.1f} {count:6d} {share:>6} {failed:6d} {summed:8.1f} {summed / wall:10.2f}x "
            f"{cpu:8.1f} {cpu / cores:11.1f}"
        )
    print(f"(cpu floor: the tier's CPU seconds over {cores} cores, the least wall time it can take here)")
    for name, _, _, _, _, slowest, hungriest in rows:
        print(f"\nslowest in {name}:")
        for seconds, test in slowest[: args.top]:
            print(f"  {seconds:7.1f} s  {test}")
        print(f"most CPU in {name}:")
        for seconds, test in hungriest[: args.top]:
            print(f"  {seconds:7.1f} s  {test}")
    print(f"\nJUnit XML: {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
