"""Which raw-path checks a suite adds to the chat probes (registered in the runner): ``raw`` runs the /generate
probes, ``full`` runs them and the lossless check."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from kimi_serve.core.suites import FULL, RAW
from kimi_serve.verify.kimi_format import STOP_IDS
from kimi_serve.verify.lossless import LOSSLESS_PROBES, MODE, run_lossless_probe
from kimi_serve.verify.probes import Probe
from kimi_serve.verify.raw import GENERATE, RAW_PROBES, run_raw_probe
from kimi_serve.verify.report import ProbeResult

RawCall = tuple[Probe, str, Callable[[], ProbeResult]]


def raw_calls(
    suite: str,
    target: Any,
    *,
    model: str,
    api_key: str | None,
    deadline: float,
    timeout: float,
    stop_ids: tuple[int, ...] = STOP_IDS,
) -> list[RawCall]:
    """``stop_ids``: the ids the served family's turns end on (core/family.py)."""
    how: dict[str, Any] = {"api_key": api_key, "deadline": deadline, "timeout": timeout}
    calls: list[RawCall] = []
    if suite in (RAW, FULL):
        calls += [(p, GENERATE, partial(run_raw_probe, p, target, **how, stop_ids=stop_ids)) for p in RAW_PROBES]
    if suite == FULL:
        calls += [(p, MODE, partial(run_lossless_probe, p, target, model=model, **how)) for p in LOSSLESS_PROBES]
    return calls
