"""`kimi-serve bench`: an A/B of two profiles across concurrency with SGLang's own ``sglang.bench_serving``, a verdict
per concurrency, the crossover, report.json and charts (docs/bench.md)."""

from __future__ import annotations

from kimi_serve.bench.sweep import BenchOptions, run_bench

__all__ = ["BenchOptions", "run_bench"]
