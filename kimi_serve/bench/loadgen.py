"""Load generation by SGLang's own ``sglang.bench_serving``, run in the SGLang interpreter as a subprocess: one call
is one cell (one server, one concurrency, one repeat). Why each flag is there: docs/bench.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimi_serve.bench.workload import Workload
from kimi_serve.core import proc
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.resources import package_root
from kimi_serve.core.settings import process_environ, with_pythonpath
from kimi_serve.verify.draft import delta_accept_length, read_counters

MODULE = "sglang.bench_serving"
USAGE_BODY = {"stream_options": {"include_usage": True}}
# The figures bench keeps from bench_serving's result (its names), per cell.
FIELDS = (
    "completed",
    "duration",
    "request_throughput",
    "output_throughput",
    "input_throughput",
    "total_output_tokens",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "median_e2e_latency_ms",
    "p99_e2e_latency_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "accept_length",
    "max_concurrency",
)


COUNTER_WAIT_S = 5.0  # reading /metrics around a cell


@dataclass(frozen=True)
class BenchEndpoint:
    base_url: str  # http://host:port
    model: str  # the served model name
    api_key: str | None
    tokenizer: str | None  # a folder or hub id for bench_serving; None: bench_serving asks /model_info


def command(
    python: str,
    endpoint: BenchEndpoint,
    workload: Workload,
    concurrency: int,
    requests: int,
    output_file: Path,
    seed: int,
) -> list[str]:
    argv = [
        *proc.python_argv(python, "-m", MODULE),
        "--backend",
        "sglang-oai-chat",
        "--base-url",
        endpoint.base_url,
        "--model",
        endpoint.model,
        "--served-model-name",
        endpoint.model,
        *workload.args,
        "--num-prompts",
        str(requests),
        "--max-concurrency",
        str(concurrency),
        "--request-rate",
        "inf",
        "--extra-request-body",
        json.dumps(USAGE_BODY),
        "--output-file",
        str(output_file),
        "--seed",
        str(seed),
        "--disable-tqdm",
        "--warmup-requests",
        "1",
        "--ready-check-timeout-sec",
        "30",
    ]
    if endpoint.tokenizer:
        argv += ["--tokenizer", endpoint.tokenizer]
    return argv


def environment(base: Mapping[str, str], endpoint: BenchEndpoint) -> dict[str, str]:
    env = with_pythonpath(base, package_root())
    env.pop("OPENAI_API_KEY", None)
    if endpoint.api_key:
        env["OPENAI_API_KEY"] = endpoint.api_key  # bench_serving sends it as `Authorization: Bearer ...`
    env.setdefault("HF_HUB_OFFLINE", "1")  # never reach a hub: the tokenizer and dataset are local
    env["PYTHONWARNINGS"] = "ignore::FutureWarning"  # the sglang.bench_serving shim's deprecation note
    return env


def run_cell(
    python: str,
    endpoint: BenchEndpoint,
    workload: Workload,
    concurrency: int,
    requests: int,
    work_dir: Path,
    seed: int,
    timeout: float,
) -> dict[str, Any]:
    """Run bench_serving once; bench's figures for the cell. KimiServeError (exit 1) when it fails."""
    work_dir.mkdir(parents=True, exist_ok=True)
    output = work_dir / f"bench_serving-c{concurrency}-s{seed}.jsonl"
    output.unlink(missing_ok=True)  # bench_serving appends
    log = work_dir / f"bench_serving-c{concurrency}-s{seed}.log"
    argv = command(python, endpoint, workload, concurrency, requests, output, seed)
    env = environment(process_environ(), endpoint)
    before = _counters(endpoint)
    started = time.monotonic()
    with log.open("wb") as sink:
        rc = proc.run_to_log(argv, sink, timeout=timeout, env=env)
    lines = output.read_text(encoding="utf-8").splitlines() if output.is_file() else []
    if rc != 0 or not lines:
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
        raise KimiServeError(
            f"sglang.bench_serving (concurrency {concurrency}) exited {rc}: {tail}",
            where=f"log {log}",
            hint="read the log; the server may have failed under load",
            exit_code=ExitCode.FAILED,
        )
    result = json.loads(lines[-1])
    out = {k: result.get(k) for k in FIELDS}
    out["errors"] = max(0, requests - int(result.get("completed") or 0))  # the requests that did not complete
    out["wall_s"] = round(time.monotonic() - started, 3)
    cell = delta_accept_length(before, _counters(endpoint))
    if cell is not None:  # this cell's own acceptance; bench_serving's figure is the server's mean since its start
        out["accept_length"], out["accept_source"] = round(cell, 3), "/metrics delta"
    elif out.get("accept_length"):
        out["accept_source"] = "/server_info since start"
    return out


def _counters(endpoint: BenchEndpoint) -> tuple[float, float] | None:
    """The server's token and verify-step counters on /metrics (verify/draft.py), within a few seconds."""
    from kimi_serve.verify import parse_target

    return read_counters(parse_target(endpoint.base_url), time.monotonic() + COUNTER_WAIT_S, endpoint.api_key)
