"""The simulator's performance MODEL of Kimi-K2.5 INT4 on 8x RTX PRO 6000 (TP8, PCIe): one scheduler step's duration
from the batch, the context and the speculative settings, and the accept-length draws (a truncated geometric
distribution whose mean is ``accept_length``; seeded). A model, not a measurement: its formulas, defaults and their
sources are in docs/simulator.md, "Performance model".
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

MODEL_NAME = "kimi-serve perf model v1 (MODEL numbers, not measurements)"


@dataclass(frozen=True)
class PerfParams:
    """Every parameter of the model, with its default. Override with KIMI_SERVE_SIM_PERF (a JSON object)."""

    base_ms: float = 12.0  # a target forward with one token: INT4 weights read once + TP8 all-reduces over PCIe
    per_token_ms: float = 0.25  # each token in the forward (compute, MoE expert traffic)
    per_seq_kctx_ms: float = 0.01  # attention: per sequence per 1000 context tokens (MLA keeps the KV small)
    prefill_per_token_ms: float = 0.08  # prompt tokens processed in a step (~12k tok/s prefill)
    draft_base_ms: float = 1.2  # one EAGLE-3 draft step (one MLA layer + lm head), B=1
    draft_per_token_ms: float = 0.02  # each drafted token in a draft step
    spec_overhead_ms: float = 0.8  # tree build, verify bookkeeping, the extra all-reduces per step
    accept_length: float = 2.9  # mean accepted tokens per verify step (steps 3, topk 1)
    seed: int = 0  # the accept-length draws
    speedup: float = 1.0  # the clock runs this many times faster than the modelled hardware (wall = model / speedup)

    @classmethod
    def from_json(cls, text: str | None, speedup: str | None = None) -> PerfParams:
        """Defaults, overridden by a JSON object (unknown keys are an error) and a speed-up factor."""
        params = cls()
        if text:
            data = json.loads(text)
            known = {f.name for f in fields(cls)}
            unknown = set(data) - known if isinstance(data, dict) else {"(not a JSON object)"}
            if unknown:
                raise ValueError(f"unknown perf model parameter(s) {sorted(unknown)}; known: {sorted(known)}")
            values: dict[str, Any] = {k: float(v) if k != "seed" else int(v) for k, v in data.items()}
            if not all(math.isfinite(v) for v in values.values()):
                raise ValueError("every value must be a finite number")
            params = replace(params, **values)
        if speedup:
            params = replace(params, speedup=float(speedup))
        if params.speedup <= 0:
            raise ValueError("speedup must be > 0")
        return params


@dataclass(frozen=True)
class SpecSettings:
    """The speculative settings the server runs with (None: speculative decoding off)."""

    algorithm: str
    steps: int
    topk: int
    draft_tokens: int

    @classmethod
    def from_server_args(cls, resolved: dict[str, Any]) -> SpecSettings | None:
        algorithm = resolved.get("speculative_algorithm")
        if not algorithm:
            return None
        steps = int(resolved.get("speculative_num_steps") or 3)
        topk = int(resolved.get("speculative_eagle_topk") or 1)
        draft = int(resolved.get("speculative_num_draft_tokens") or steps * topk + 1)
        return cls(str(algorithm), steps, topk, draft)


def accept_probability(mean: float, steps: int) -> float:
    """``p`` such that 1 + p + p^2 + ... + p^steps == mean (bisection; mean clipped to [1, steps + 1])."""
    target = min(max(mean, 1.0), steps + 1.0)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid**i for i in range(steps + 1)) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


class PerfModel:
    """Step costs and accept-length draws for one server's settings."""

    def __init__(self, params: PerfParams, spec: SpecSettings | None, max_running: int | None) -> None:
        self.params, self.spec = params, spec
        self.max_running = max_running if max_running and max_running > 0 else None
        self._p = accept_probability(params.accept_length, spec.steps) if spec else 0.0
        self._rng = random.Random(params.seed)

    def _target_ms(self, batch: int, tokens_per_seq: int, mean_ctx: float) -> float:
        p = self.params
        return p.base_ms + p.per_token_ms * batch * tokens_per_seq + p.per_seq_kctx_ms * batch * mean_ctx / 1000

    def step_ms(self, batch: int, mean_ctx: float, prefill_tokens: int = 0) -> float:
        """Model milliseconds of one step (decode for ``batch`` requests + the prompt tokens admitted with it)."""
        p = self.params
        ms = p.prefill_per_token_ms * prefill_tokens
        if batch <= 0:
            return ms + (p.base_ms if prefill_tokens else 0.0)
        if self.spec is None:
            return ms + self._target_ms(batch, 1, mean_ctx)
        s = self.spec
        draft = s.steps * (p.draft_base_ms + p.draft_per_token_ms * batch * s.topk)
        return ms + draft + self._target_ms(batch, s.draft_tokens, mean_ctx) + p.spec_overhead_ms

    def draw_accept(self) -> int:
        """Tokens one request gains in one step: 1 without speculative decoding, else 1 + accepted drafts."""
        if self.spec is None:
            return 1
        n = 1
        while n <= self.spec.steps and self._rng.random() < self._p:
            n += 1
        return n

    def mean_accept(self) -> float:
        return sum(self._p**i for i in range(self.spec.steps + 1)) if self.spec else 1.0

    def describe(self) -> dict[str, Any]:
        """What /server_info says about the model (bench copies it into its report)."""
        return {
            "name": MODEL_NAME,
            "params": asdict(self.params),
            "max_running_requests": self.max_running,
            "speculative": asdict(self.spec) if self.spec else None,
            "accept_distribution": (
                f"truncated geometric on 1..{self.spec.steps + 1}, p={self._p:.4f}, mean {self.mean_accept():.3f}"
            )
            if self.spec
            else None,
        }
