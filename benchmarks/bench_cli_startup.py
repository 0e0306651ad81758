#!/usr/bin/env python3
"""CLI start-up cost: `kimi-serve --help` and `render --json` against a minimal two-command Typer app's `--help`.

Targets (issue 2): --help within 1.25x of the minimal app's --help; render --json within 2x.
Run: .venv/bin/python benchmarks/bench_cli_startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MINIMAL = '''
import typer
app = typer.Typer(add_completion=False)
@app.command()
def one() -> None:
    """First."""
@app.command()
def two() -> None:
    """Second."""
app()
'''


def timed(argv: list[str], runs: int) -> float:
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    runs = ap.parse_args().runs
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        minimal = Path(tmp) / "minimal.py"
        minimal.write_text(MINIMAL)
        base = timed([py, str(minimal), "--help"], runs)
    kimi = [py, "-m", "kimi_serve"]
    help_t = timed([*kimi, "--help"], runs)
    render_t = timed([*kimi, "render", "--profile", "prod", "--json"], runs)
    show_t = timed([*kimi, "show", "--profile", "prod"], runs)
    print(f"minimal typer --help      {base * 1000:7.1f} ms")
    print(f"kimi-serve --help         {help_t * 1000:7.1f} ms  ratio {help_t / base:4.2f} (target <= 1.25)")
    print(f"kimi-serve render --json  {render_t * 1000:7.1f} ms  ratio {render_t / base:4.2f} (target <= 2.00)")
    print(f"kimi-serve show           {show_t * 1000:7.1f} ms  ratio {show_t / base:4.2f}")


if __name__ == "__main__":
    main()
