"""`kimi-serve bench`: A/B two profiles across concurrency with SGLang's own bench_serving (docs/bench.md)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import typer

from kimi_serve.commands.numbers import number_option
from kimi_serve.commands.options import emit
from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.findings import PASS, Finding
from kimi_serve.core.settings import SIM_MAX_SPEEDUP, current

# Sane upper bounds (docs/bench.md): beyond them a sweep cannot finish (or even be planned) on any server.
MAX_CONCURRENCY = 4096
MAX_REQUESTS = 100_000
MAX_REPEAT = 100
_MAX_CONCURRENCY_VALUES = 32


def _concurrency(text: str) -> list[int]:
    parts = [v.strip() for v in text.split(",") if v.strip()] if len(text) <= 1000 else []
    values = sorted({int(v) for v in parts if v.isdigit() and len(v) <= 6})
    if not parts or len(values) != len(set(parts)) or values[0] < 1 or values[-1] > MAX_CONCURRENCY:
        raise KimiServeError(
            f"invalid concurrency list {text[:80]!r}",
            where="--concurrency",
            hint=f"comma-separated integers 1..{MAX_CONCURRENCY}, e.g. 1,4,16,32,64",
        )
    if len(values) > _MAX_CONCURRENCY_VALUES:
        raise KimiServeError(
            f"{len(values)} concurrency values",
            where="--concurrency",
            hint=f"at most {_MAX_CONCURRENCY_VALUES} values, e.g. 1,4,16,32,64",
        )
    return values


def _perf_overrides(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None

    try:
        from kimi_serve.core.inputs import load_json
        from kimi_serve.simulator.perf import PerfParams

        data: dict[str, Any] = load_json(text)  # bounded depth first: PerfParams reads it with json.loads
        PerfParams.from_json(text)
        if any(not math.isfinite(v) for v in data.values()):
            raise ValueError("every value must be a finite number")
    except (ValueError, TypeError) as exc:  # TypeError: a value that is no number (a list, an object)
        raise KimiServeError(
            f"invalid performance model parameters: {exc}",
            where="--perf-model",
            hint='a JSON object such as {"per_token_ms": 0.3}; see docs/simulator.md',
        ) from None
    return data


def register(app: typer.Typer) -> None:
    @app.command("bench")
    def bench(
        profile: str = typer.Option(..., "--profile", "-p", help="Profile A (name or path), e.g. prod or sim."),
        against: str = typer.Option(..., "--against", help="Profile B, e.g. baseline or sim-baseline."),
        concurrency: str = typer.Option("1,4,16,32,64", "--concurrency", help="Requests in flight, comma-separated."),
        requests: int = typer.Option(
            64, "--requests", min=1, max=MAX_REQUESTS, help="Requests per profile x concurrency x repeat."
        ),
        workload: str = typer.Option(
            "agentic",
            "--workload",
            help="agentic (Kimi-shaped, shipped), random (fixed 1024/256 token ids) or a JSONL FILE of chat requests.",
        ),
        repeat: int = typer.Option(
            1,
            "--repeat",
            min=1,
            max=MAX_REPEAT,
            help="Runs per cell; the spread decides 'no difference' (1: no spread, each verdict marked single sample).",
        ),
        out: Path = typer.Option(
            Path("bench-out"), "--out", help="Results folder (resumable: recorded cells are skipped)."
        ),
        host: list[str] = typer.Option(
            [],
            "--host",
            help="Use running servers instead of starting the profiles: give it twice (A's, then B's HOST:PORT).",
        ),
        api_key: str | None = typer.Option(None, "--api-key", help="API key for --host servers."),
        speedup: float | None = number_option(
            None,
            "--speedup",
            lo=0.01,
            hi=SIM_MAX_SPEEDUP,
            help="Simulator profiles: run the performance model's clock this many times faster.",
        ),
        perf_model: str | None = typer.Option(
            None,
            "--perf-model",
            help="Simulator profiles: performance model parameters to override, a JSON object (docs/simulator.md).",
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the report in the JSON envelope (docs/json.md)."),
    ) -> int:
        """A/B two profiles across concurrency: bring each up (or use --host), contract check, sweep with
        sglang.bench_serving, stop; table, verdict per concurrency, crossover, report.json and PNG charts in --out.
        """
        from kimi_serve.bench import BenchOptions, run_bench
        from kimi_serve.bench.sweep import arm_profiles

        def say(line: str) -> None:
            typer.echo(f"kimi-serve bench: {line}", err=True)

        opts = BenchOptions(
            profile=profile,
            against=against,
            profiles=arm_profiles(profile, against, list(host)),
            concurrency=_concurrency(concurrency),
            requests=requests,
            workload=workload,
            repeat=repeat,
            out=out,
            hosts=list(host),
            api_key=api_key or current().api_key,
            speedup=speedup,
            perf=_perf_overrides(perf_model),
        )
        report = run_bench(opts, say)
        from kimi_serve.bench.report import markdown

        def text() -> None:
            typer.echo(markdown(report))
            say(f"report: {out / 'report.json'}")

        verdicts = [Finding("bench", "verdict", PASS, str(v.get("text", ""))) for v in report.get("verdicts") or []]
        return emit(as_json, 0, text, command="bench", data=report, findings=verdicts)
