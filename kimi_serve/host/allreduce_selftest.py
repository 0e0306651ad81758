"""The collective self-test (docs/up.md "The collective self-test"), kimi-serve's pure side: before a GPU profile
serves, each all-reduce path it enables is compared with NCCL and the exact sum at decode- and prefill-sized messages,
under a deadline. Here: the plan, each rank's command line (:mod:`kimi_serve.sglang.allreduce_ranks` in the engine
interpreter, one process per rank, a file rendezvous, no torchrun), the ranks' output read back and the findings (a
path that disagrees or hangs fails, naming the profile change that removes it). up/selftest.py runs the ranks for
`doctor` and `up`'s preflight.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kimi_serve.core.findings import FAIL, PASS, WARN, Finding
from kimi_serve.core.report import json_meta, to_json
from kimi_serve.profile.loader import Profile

CODE = "allreduce_selftest"
MODULE = "kimi_serve.sglang.allreduce_ranks"
MARK = "KIMI-SELFTEST "  # the ranks' event lines (allreduce_ranks.MARK: that module runs in the engine, not here)
HIDDEN = 7168  # Kimi-K2.5's hidden size: one all-reduce per layer carries rows x 7168 bf16
DECODE_ROWS = (1, 8, 32)
PREFILL_ROWS = 8192  # one chunked-prefill chunk (memory.chunked_prefill_size in prod): 8192 x 7168 x 2 B = 112 MiB
DEADLINE_S = 300.0  # NCCL init, the communicators' setup (and FlashInfer's JIT on a cold cache), every reduction
ATOL = 0.0  # the inputs are exact in bf16 and so is every order of their sum: a correct path returns exactly it

LABELS = {
    "nccl": "NCCL",
    "flashinfer_fusion": "FlashInfer all-reduce fusion",
    "torch_symm_mem": "torch symmetric memory",
    "pcie_ipc": "SGLang's PCIe-IPC all-reduce",
}
REMOVAL = {  # the profile change that takes a path out of the start
    "flashinfer_fusion": "allreduce.flashinfer_fusion_backend: null (--set allreduce.flashinfer_fusion_backend=null)",
    "torch_symm_mem": "allreduce.torch_symm_mem: false (--set allreduce.torch_symm_mem=false)",
    "pcie_ipc": "allreduce.pcie_ipc: false (--set allreduce.pcie_ipc=false)",
}
SAFE_PROFILE = "or start the PCIe-IPC-only profile (--profile prod-ipc; docs/profiles.md)"


@dataclass(frozen=True)
class SelftestPlan:
    world_size: int = field(metadata=json_meta(omit=True))  # the ranks' command line carries it
    paths: tuple[str, ...]  # the enabled paths, in SGLang's order of precedence (FlashInfer first)
    sizes: tuple[tuple[str, int, int], ...]  # (name, rows, cols)
    deadline_s: float = field(default=DEADLINE_S, metadata=json_meta(omit=True))
    atol: float = ATOL
    backend: str = "nccl"


def default_sizes(hidden: int = HIDDEN) -> tuple[tuple[str, int, int], ...]:
    decode = tuple((f"decode bs{n} ({n}x{hidden})", n, hidden) for n in DECODE_ROWS)
    return (*decode, (f"prefill chunk ({PREFILL_ROWS}x{hidden})", PREFILL_ROWS, hidden))


def enabled_paths(profile: Profile) -> tuple[str, ...]:
    """The all-reduce paths the profile's flags enable, as prod enables them: the fusion backend flag, the torch
    symmetric-memory flag, the PCIe-IPC switch (``allreduce.pcie_ipc`` or its variable set to "1")."""
    ar = profile.allreduce
    on = {
        "flashinfer_fusion": ar.flashinfer_fusion_backend,
        "torch_symm_mem": ar.torch_symm_mem,
        "pcie_ipc": ar.pcie_ipc or profile.env.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE") == "1",
    }
    return tuple(path for path, enabled in on.items() if enabled)


def plan_for(profile: Profile, on_gpus: bool, deadline_s: float = DEADLINE_S) -> SelftestPlan | str:
    """The plan for ``profile`` (``on_gpus``: it runs on CUDA GPUs, host/doctor.py ``uses_gpus``), or why it has none
    (a line)."""
    if profile.engine != "sglang":
        return f"engine: {profile.engine}: no GPU all-reduce to test"
    if not on_gpus:
        return "--device cpu: not a CUDA start"
    if profile.nodes.count > 1:
        return f"nodes.count {profile.nodes.count}: the single-node all-reduce paths are off across nodes"
    return SelftestPlan(profile.parallel.tp_size, enabled_paths(profile), default_sizes(), deadline_s)


@dataclass
class RankLog:
    events: list[dict[str, Any]] = field(default_factory=list)
    status: int | None = None
    tail: list[str] = field(default_factory=list)  # its last lines that were not events

    def last(self, event: str) -> dict[str, Any] | None:
        return next((e for e in reversed(self.events) if e.get("event") == event), None)

    def done(self) -> bool:
        return self.last("done") is not None


@dataclass
class SelftestReport:
    plan: SelftestPlan
    ranks: list[RankLog]
    hung: bool = False
    wall_s: float = 0.0


def parse_event(text: str) -> dict[str, Any] | None:
    at = text.find(MARK)
    if at < 0:
        return None
    try:
        event = json.loads(text[at + len(MARK) :])
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def is_event(text: str) -> bool:
    return MARK in text


def rank_log(lines: Sequence[str], status: int | None, others: Sequence[str] = ()) -> RankLog:
    """One rank's events and last other lines, from what it printed (``others``: its last lines that were not
    events, where the runner kept them apart)."""
    log = RankLog(status=status)
    for text in [*lines, *others]:
        event = parse_event(text)
        if event is not None:
            log.events.append(event)
        elif text.strip():
            log.tail = [*log.tail[-4:], text.strip()[:300]]
    return log


def rank_argv(interpreter: str, plan: SelftestPlan) -> Callable[[int, str], list[str]]:
    """Rank R's command line in the engine interpreter: ``python -P -m kimi_serve.sglang.allreduce_ranks ...``."""
    from kimi_serve.core.proc import python_argv

    blob = json.dumps(to_json(plan))

    def argv(rank: int, init: str) -> list[str]:
        flags = {"--rank": str(rank), "--world-size": str(plan.world_size), "--init-method": init, "--plan": blob}
        return python_argv(interpreter, "-m", MODULE, *(word for pair in flags.items() for word in pair))

    return argv


def _finding(status: str, message: str, fix: str = "") -> Finding:
    return Finding("doctor", CODE, status, message, fix)


def _fix(path: str) -> str:
    return f"set {REMOVAL[path]}, {SAFE_PROFILE}" if path in REMOVAL else "see docs/up.md 'The collective self-test'"


def findings(report: SelftestReport) -> list[Finding]:
    """What the run proved: one failure per path that disagreed or hung (its name, the size, the fix), a warning where
    nothing could be tested, else one pass line."""
    plan, ranks = report.plan, report.ranks
    where = f"TP {plan.world_size}"
    events = [e for r in ranks for e in r.events]
    unavailable = next((e for e in events if e.get("event") == "unavailable"), None)
    if unavailable:
        fix = "run it where the engine's torch sees the profile's GPUs (doctor on the GPU host)"
        return [_finding(WARN, f"not run at {where}: {unavailable.get('reason')}", fix)]
    out: list[Finding] = []
    if report.hung:
        started = next((s for s in (r.last("start") for r in ranks if not r.done()) if s), None)
        if started is None:
            message = f"the ranks did not join at {where} within {plan.deadline_s:g}s: killed"
            out.append(_finding(FAIL, message, "check NCCL on this host (NCCL_DEBUG=INFO; ACS/IOMMU; NCCL_P2P_LEVEL)"))
        else:
            path = str(started.get("path"))
            message = f"{LABELS.get(path, path)} hung at {where}, {started.get('size')}: no answer within "
            out.append(_finding(FAIL, f"{message}{plan.deadline_s:g}s, its ranks were killed", _fix(path)))
    bad: dict[str, dict[str, Any]] = {}
    for e in events:
        if e.get("event") == "result" and e.get("ok") is False:
            bad.setdefault(str(e.get("path")), e)
    for path, e in bad.items():
        message = f"{LABELS.get(path, path)} disagrees with the exact sum at {where}, {e.get('size')} "
        out.append(_finding(FAIL, f"{message}(max error {e.get('max_err')}, tolerance {plan.atol:g})", _fix(path)))
    crashed = next(((i, r) for i, r in enumerate(ranks) if not r.done()), None)
    if crashed is not None and not report.hung:
        i, rank = crashed
        message = f"rank {i} of the self-test exited {rank.status} before the end: "
        last = rank.tail[-1].strip() if rank.tail else "no output"
        out.append(_finding(FAIL, message + last, f"run doctor --debug; if a path's setup crashed, {SAFE_PROFILE}"))
    return out or [_summary(report)]


def _summary(report: SelftestReport) -> Finding:
    plan, events = report.plan, report.ranks[0].events
    taken = sorted({str(e["path"]) for e in events if e.get("event") == "result" and e.get("taken")} - {"nccl"})
    idle = [
        f"{LABELS.get(str(e['path']), e['path'])} not engaged ({e.get('reason')})"
        for e in events
        if e.get("event") == "setup" and not e.get("engaged")
    ]
    tested = ", ".join(LABELS[p] for p in taken) or "no path besides NCCL took a size"
    text = (
        f"{len(plan.sizes)} sizes at TP {plan.world_size} agree with the exact sum: {tested} "
        f"({report.wall_s:.0f}s)" + ("; " + "; ".join(idle) if idle else "")
    )
    if any(e.get("error") for e in events if e.get("event") == "setup"):
        return _finding(WARN, text, "a path that could not be set up is not tested: see the reason")
    return _finding(PASS, text)
