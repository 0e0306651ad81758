"""What `bench` writes and prints: ``report.json`` (schema ``kimi-serve.bench/1``, docs/bench.md) and the Markdown
table. A report whose servers are simulators says on every line of the table, in the JSON and on each chart that its
numbers come from the simulator's performance MODEL, not from measurements."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kimi_serve import __version__
from kimi_serve.bench import verdict as vd

SCHEMA = "kimi-serve.bench/1"
SCHEMA_VERSION = 1
MODEL_NOTICE = (
    "MODEL numbers: the servers are kimi-serve simulators paced by a performance model "
    "(docs/simulator.md), not measurements of a GPU server"
)
PROFILE_KEYS = ("name", "role", "source", "base_url", "fingerprint", "simulated", "speedup", "perf_model")


def build(
    *,
    profiles: list[dict[str, Any]],
    cells: dict[str, dict[int, list[dict[str, Any]]]],
    concurrency: list[int],
    repeat: int,
    workload: dict[str, Any],
) -> dict[str, Any]:
    """The report from the recorded cells (``cells[profile][concurrency]`` = one dict per repeat)."""
    simulated = any(p["simulated"] for p in profiles)
    results: dict[str, dict[str, Any]] = {}
    for p in profiles:
        per = cells.get(p["name"], {})
        speedup = float(p.get("speedup") or 1.0)
        results[p["name"]] = {
            str(c): vd.summarize([vd.to_model_time(x, speedup) for x in per.get(c, [])]) for c in concurrency
        }
    a, b = profiles[0]["name"], profiles[1]["name"]
    verdicts = [
        {"concurrency": c, **vd.compare(results[a].get(str(c)), results[b].get(str(c)), a, b)} for c in concurrency
    ]
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "kimi_serve_version": __version__,
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "simulated": simulated,
        "notice": MODEL_NOTICE if simulated else None,
        "workload": workload,
        "concurrency": list(concurrency),
        "repeat": repeat,
        "profiles": [{k: p.get(k) for k in PROFILE_KEYS} for p in profiles],
        "results": results,
        "verdicts": verdicts,
        "crossover": vd.crossover([(v["concurrency"], v) for v in verdicts]),
        "charts": [],
        "charts_skipped": None,
    }


def _fmt(stat: dict[str, float] | None, digits: int = 1) -> str:
    if not stat:
        return "-"
    text = f"{stat['mean']:.{digits}f}"
    if stat["min"] != stat["max"]:
        text += f" ({stat['min']:.{digits}f}-{stat['max']:.{digits}f})"
    return text


def _pair(s: dict[str, Any], figure: str) -> str:
    return f"{_fmt(s.get(f'{figure}_p50_ms'))} / {_fmt(s.get(f'{figure}_p99_ms'))}"


def _acceptance(report: dict[str, Any]) -> list[str]:
    """Where the accept column comes from, for this workload: each cell's own acceptance (tokens / verify steps
    between two /metrics readings) or, where /metrics has no counters, the server's mean since its start."""
    sources = {
        str(s["accept_source"])
        for per in report["results"].values()
        for s in per.values()
        if s and s.get("accept_source")
    }
    if not sources:
        return []
    how = {
        "/metrics delta": "each cell's own, sglang:generation_tokens_total / sglang:spec_verify_calls_total between "
        "two /metrics readings",
        "/server_info since start": "the server's mean since its start (bench_serving's avg_spec_accept_length; "
        "/metrics had no counters)",
    }
    text = "; ".join(how.get(src, src) for src in sorted(sources))
    name = (report.get("workload") or {}).get("name", "?")
    return ["", f"accept: mean accepted tokens per verify step on workload {name}, per concurrency: {text}."]


def markdown(report: dict[str, Any]) -> str:
    """The terminal table: one row per concurrency x profile, then the verdict per concurrency and the crossover."""
    source = "MODEL" if report["simulated"] else "measured"
    lines = []
    if report["simulated"]:
        lines += [f"**{report['notice']}.**", ""]
    lines += [
        "| C | profile | out tok/s | req/s | TTFT p50/p99 ms | ITL p50/p99 ms | E2E p50/p99 ms | accept | errors "
        "| source |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for c in report["concurrency"]:
        for p in report["profiles"]:
            s = report["results"][p["name"]].get(str(c)) or {}
            accept = _fmt(s.get("accept_length"), 2) if s.get("accept_length") else "n/a"
            errors = _fmt(s.get("errors"), 0)
            lines.append(
                f"| {c} | {p['name']} | {_fmt(s.get('output_tok_s'))} | {_fmt(s.get('req_s'), 2)} | "
                f"{_pair(s, 'ttft')} | {_pair(s, 'itl')} | {_pair(s, 'e2e')} | {accept} | {errors} | "
                f"{source} |"
            )
    lines += _acceptance(report)
    lines += ["", "| C | verdict (output tok/s) | source |", "|---:|---|---|"]
    lines += [f"| {v['concurrency']} | {v['text']} | {source} |" for v in report["verdicts"]]
    cross = report["crossover"]
    lines += ["", f"Crossover: {cross['text']} ({source})." if cross else f"Crossover: none ({source})."]
    if report.get("charts"):
        lines.append(f"Charts: {', '.join(report['charts'])} ({source}).")
    if report.get("charts_skipped"):
        lines.append(f"Charts skipped: {report['charts_skipped']}.")
    if report["simulated"]:
        lines += ["", f"**{report['notice']}.**"]
    return "\n".join(lines)
