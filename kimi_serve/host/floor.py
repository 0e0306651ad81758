"""The cold-start floor of a profile on this host, as figures (for `up`'s prediction) and as doctor findings.

``doctor`` measures the bandwidth now (bounded, :func:`kimi_serve.host.coldstart.probe_bandwidth`) and remembers it
per filesystem; ``up`` reuses that measurement and only probes when there is none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kimi_serve.core.findings import PASS, SKIP, WARN, Finding
from kimi_serve.core.report import to_json
from kimi_serve.host import coldstart as cs
from kimi_serve.host.gpus import doctor_finding
from kimi_serve.host.starts import (
    cached_bandwidth,
    describe_start,
    predict_weights_s,
    read_starts,
    remember_bandwidth,
)
from kimi_serve.profile.loader import Profile

LAST_STARTS_SHOWN = 3
RAM_MARGIN = 0.10  # of MemTotal, kept free for the server's own host memory when the checkpoint is cached
NO_CHECKPOINT = "no checkpoint is read (engine: simulator or --load-format dummy)"


def model_dirs(p: Profile) -> list[Path]:
    dirs = [Path(p.model.path)]
    if p.speculative.enabled and p.speculative.draft_model_path:
        dirs.append(Path(p.speculative.draft_model_path))
    return dirs


def loads_weights(p: Profile) -> bool:
    return p.engine == "sglang" and "--load-format dummy" not in " ".join(p.extra_args)


def figures(p: Profile, state_root: Path, *, probe: str = "if-unknown", bound: int = cs.PROBE_BOUND) -> cs.Figures:
    """The floor's parts now. ``probe``: "always" (doctor), "if-unknown" (up: reuse a remembered measurement),
    "never"."""
    ckpt = cs.checkpoint_of(model_dirs(p))
    mem = cs.meminfo()
    cached = cs.residency(ckpt) if ckpt.files else 0
    bw: float | None = None
    source = "no shards"
    if ckpt.files:
        device = ckpt.files[0].stat().st_dev
        known = cached_bandwidth(state_root, device)
        if probe == "never" or (probe == "if-unknown" and known):
            bw = float(known["bytes_per_s"]) if known else None
            source = f"measured {known.get('time', '?')} ({known.get('method')})" if known else "not measured"
        else:
            try:
                m = cs.probe_bandwidth(ckpt, bound=bound)
                bw = m.bytes_per_s or None
                source = f"measured now: {cs.gb(m.bytes_read)} in {m.seconds:.2f}s ({m.method})"
                try:
                    remember_bandwidth(state_root, m, str(ckpt.files[0].parent))
                except OSError:
                    source += ", not remembered (state root not writable)"
            except (OSError, cs.ProbeError) as exc:
                source = f"probe failed: {exc}"
    return cs.Figures(ckpt, cached, mem.get("MemAvailable", 0), mem.get("MemTotal", 0), bw, source)


def prewarm_room(fig: cs.Figures) -> tuple[int, int]:
    """(bytes prewarm must bring in, bytes it may: MemAvailable minus the margin)."""
    need = max(fig.checkpoint.total - fig.cached, 0)
    return need, max(int(fig.mem_available - RAM_MARGIN * fig.mem_total), 0)


def figures_json(fig: cs.Figures, starts: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures behind doctor's cold-start lines, as numbers (``doctor --json`` ``figures``, docs/json.md)."""
    predicted, how = predict_weights_s(fig, starts)
    total = fig.checkpoint.total
    return {
        **to_json(fig),
        "cached_fraction": round(fig.cached / total, 4) if total else None,
        "ram_margin_fraction": RAM_MARGIN,
        "predicted_weights_s": round(predicted, 2) if predicted is not None else None,
        "prediction_basis": how,
    }


def coldstart_report(
    p: Profile, state_root: Path, *, probe: str = "always"
) -> tuple[list[Finding], dict[str, Any] | None]:
    """Doctor's lines (checkpoint bytes, bandwidth, cache, RAM, the floor and the prediction, the last starts) and the
    figures behind them (None when nothing was measured)."""
    if not loads_weights(p):
        return [doctor_finding("coldstart", SKIP, NO_CHECKPOINT)], None
    try:
        fig = figures(p, state_root, probe=probe)
    except OSError as exc:
        fix = "check the model directory"
        return [doctor_finding("coldstart", WARN, f"cannot measure the cold start: {exc}", fix)], None
    ck = fig.checkpoint
    if not ck.files:
        return [doctor_finding("coldstart", SKIP, "no shards to measure (see the model check)")], None
    missing = f", {ck.missing} missing" if ck.missing else ""
    out = [
        doctor_finding("checkpoint", PASS, f"{cs.gb(ck.total)} in {ck.shards} shard(s) (safetensors index){missing}")
    ]
    if fig.bandwidth:
        bandwidth = f"{fig.bandwidth / 1e9:.2f} GB/s sequential ({fig.bandwidth_source})"
        out.append(doctor_finding("read_bandwidth", PASS, bandwidth))
    else:
        unknown = f"sequential read bandwidth unknown: {fig.bandwidth_source}"
        fix = "run kimi-serve doctor when the checkpoint is not fully cached"
        out.append(doctor_finding("read_bandwidth", WARN, unknown, fix))
    pct = 100 * fig.cached / ck.total if ck.total else 0.0
    cached = f"{cs.gb(fig.cached)} of the checkpoint in the page cache ({pct:.0f}%)"
    out.append(doctor_finding("page_cache", PASS, cached))
    need, room = prewarm_room(fig)
    ram = f"{cs.gb(fig.mem_available)} available of {cs.gb(fig.mem_total)}"
    if need > room:
        message = (
            f"{ram}: the uncached {cs.gb(need)} do not fit in the page cache (keeping {RAM_MARGIN:.0%} free): every "
            "start reads them from disk, prewarm refuses"
        )
        fix = "add RAM or free page cache; prod's loader.prefetch is pointless without room"
        out.append(doctor_finding("ram", WARN, message, fix))
    else:
        out.append(doctor_finding("ram", PASS, f"{ram}: the checkpoint fits in the page cache (prewarm can hold it)"))
    starts = read_starts(state_root)
    if fig.floor_s is not None:
        predicted, how = predict_weights_s(fig, starts)
        assert fig.predicted_disk_s is not None
        message = (
            f"disk floor {cs.seconds(fig.floor_s)} for the weights ({cs.gb(ck.total)} at "
            f"{fig.bandwidth / 1e9 if fig.bandwidth else 0:.2f} GB/s); uncached now: "
            f"{cs.seconds(fig.predicted_disk_s)}; predicted weight phase "
            f"{cs.seconds(predicted or 0)} ({how}); CUDA graphs and warmup come on top"
        )
        out.append(doctor_finding("floor", PASS, message))
    out += [doctor_finding("last_start", PASS, describe_start(s)) for s in starts[-LAST_STARTS_SHOWN:]]
    return out, figures_json(fig, starts)


def prediction_line(p: Profile, state_root: Path) -> str:
    """One line for `status`: the next cold start's weight phase, predicted from the remembered bandwidth and the
    page cache now (no probe)."""
    if not loads_weights(p):
        return NO_CHECKPOINT
    try:
        fig = figures(p, state_root, probe="never")
    except OSError as exc:
        return f"cannot measure the checkpoint: {exc}"
    if not fig.checkpoint.files:
        return "no shards found"
    cached = 100 * fig.cached / fig.checkpoint.total if fig.checkpoint.total else 0.0
    head = f"{cs.gb(fig.checkpoint.total)}, {cached:.0f}% cached"
    if fig.floor_s is None:
        return f"{head}; bandwidth not measured yet (run kimi-serve doctor)"
    predicted, how = predict_weights_s(fig, read_starts(state_root))
    return f"{head}; weights predicted {cs.seconds(predicted or 0)} ({how}), disk floor {cs.seconds(fig.floor_s)}"
