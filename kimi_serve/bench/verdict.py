"""From cells to conclusions (pure, no I/O): mean and spread per profile and concurrency, the verdict per
concurrency and the crossover (docs/bench.md). Spread: [min, max] over the repeats widened by ``NOISE_FLOOR`` on each
side, so one repeat still has a width; overlapping spreads are "no difference", and a single repeat says so.
Crossover: the first concurrency whose winner differs from the last one before it that had a winner.
"""

from __future__ import annotations

from statistics import mean
from typing import Any

NOISE_FLOOR = 0.02
SINGLE_SAMPLE = "single sample, no spread measured: --repeat 2 or more to confirm"
VERDICT_FIGURE = "output_throughput"
# figure -> (report name, unit, higher is better)
FIGURES: dict[str, tuple[str, str, bool]] = {
    "output_throughput": ("output_tok_s", "tok/s", True),
    "request_throughput": ("req_s", "req/s", True),
    "median_ttft_ms": ("ttft_p50_ms", "ms", False),
    "p99_ttft_ms": ("ttft_p99_ms", "ms", False),
    "median_itl_ms": ("itl_p50_ms", "ms", False),
    "p99_itl_ms": ("itl_p99_ms", "ms", False),
    "median_e2e_latency_ms": ("e2e_p50_ms", "ms", False),
    "p99_e2e_latency_ms": ("e2e_p99_ms", "ms", False),
    "accept_length": ("accept_length", "tokens/step", True),
    "errors": ("errors", "requests", False),
}
# what a simulator run faster than the model scales: its times up, its rates down (read from FIGURES' units)
_TIME_FIGURES = {k for k, (_name, unit, _higher) in FIGURES.items() if unit == "ms"}
_RATE_FIGURES = {k for k, (_name, unit, _higher) in FIGURES.items() if unit.endswith("/s")}


def to_model_time(cell: dict[str, Any], speedup: float) -> dict[str, Any]:
    """A simulator cell run ``speedup`` times faster than the model, converted back to the model's time."""
    out = dict(cell)
    for k in _TIME_FIGURES:
        if isinstance(out.get(k), int | float):
            out[k] = out[k] * speedup
    for k in _RATE_FIGURES:
        if isinstance(out.get(k), int | float):
            out[k] = out[k] / speedup
    return out


def summarize(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean, min and max of every figure over the repeats of one profile x concurrency."""
    out: dict[str, Any] = {"repeats": len(cells)}
    for key, (name, _unit, _higher) in FIGURES.items():
        values = [float(c[key]) for c in cells if isinstance(c.get(key), int | float)]
        out[name] = (
            {"mean": round(mean(values), 3), "min": round(min(values), 3), "max": round(max(values), 3)}
            if values
            else None
        )
    sources = sorted({str(c["accept_source"]) for c in cells if c.get("accept_source")})
    out["accept_source"] = ", ".join(sources) or None  # /metrics delta: this cell's own; else the server's mean
    return out


def _band(stat: dict[str, float]) -> tuple[float, float]:
    return stat["min"] * (1 - NOISE_FLOOR), stat["max"] * (1 + NOISE_FLOOR)


def compare(a: dict[str, Any] | None, b: dict[str, Any] | None, name_a: str, name_b: str) -> dict[str, Any]:
    """The verdict at one concurrency on output tok/s: winner (or None), margin in percent, whether spreads overlap."""
    key = FIGURES[VERDICT_FIGURE][0]
    sa, sb = (a or {}).get(key), (b or {}).get(key)
    if not sa or not sb:
        return {"winner": None, "margin_pct": None, "overlap": None, "single_sample": None, "text": "incomplete"}
    (lo_a, hi_a), (lo_b, hi_b) = _band(sa), _band(sb)
    overlap = lo_a <= hi_b and lo_b <= hi_a
    hi, lo = (name_a, name_b) if sa["mean"] >= sb["mean"] else (name_b, name_a)
    top, bottom = max(sa["mean"], sb["mean"]), min(sa["mean"], sb["mean"])
    margin = round(100 * (top - bottom) / bottom, 1) if bottom > 0 else None
    # one run per side measures no spread: the noise floor alone decides, and the verdict says it is one sample's
    single = min((a or {}).get("repeats", 0), (b or {}).get("repeats", 0)) < 2
    mark = f" ({SINGLE_SAMPLE})" if single else ""
    if overlap:
        text = f"no difference ({'within the noise floor' if single else 'spreads overlap'}; {hi} +{margin}%){mark}"
    else:
        text = f"{hi} by {margin}% over {lo}{mark}"
    return {
        "winner": None if overlap else hi,
        "margin_pct": margin,
        "overlap": overlap,
        "single_sample": single,
        "text": text,
    }


def crossover(verdicts: list[tuple[int, dict[str, Any]]]) -> dict[str, Any] | None:
    """The first change of winner along increasing concurrency, or None."""
    last: tuple[int, str, bool] | None = None
    for concurrency, v in sorted(verdicts):
        winner = v.get("winner")
        if not winner:
            continue
        if last and winner != last[1]:
            mark = f" ({SINGLE_SAMPLE})" if last[2] or v.get("single_sample") else ""
            return {
                "between": [last[0], concurrency],
                "before": last[1],
                "after": winner,
                "text": f"{winner} overtakes {last[1]} between concurrency {last[0]} and {concurrency}{mark}",
            }
        last = (concurrency, winner, bool(v.get("single_sample")))
    return None
