"""The simulator's scheduler clock (simulator/clock.py): one step loop for all requests, batch limit, prefill first,
accept-length draws per step, step times from the performance model. Pure asyncio: no sglang needed."""

from __future__ import annotations

import asyncio
import time

from kimi_serve.simulator.clock import StepClock
from kimi_serve.simulator.perf import PerfModel, PerfParams, SpecSettings

EAGLE = SpecSettings("EAGLE3", steps=3, topk=1, draft_tokens=4)


async def _decode(clock: StepClock, prompt: int, tokens: int, log: list[tuple[int, int]], tag: int) -> float:
    slot = clock.join(prompt)
    got, started = 0, time.monotonic()
    try:
        while got < tokens:
            n = await clock.tokens(slot)
            log.append((tag, n))
            got += n
    finally:
        clock.leave(slot)
    return time.monotonic() - started


def test_batch_limit_queues_requests_and_baseline_steps_yield_one_token() -> None:
    clock = StepClock(PerfModel(PerfParams(speedup=1000), None, max_running=1))
    log: list[tuple[int, int]] = []

    async def main() -> None:
        await asyncio.gather(_decode(clock, 100, 5, log, 0), _decode(clock, 100, 5, log, 1))

    asyncio.run(main())
    assert all(n == 1 for _, n in log)
    assert [t for t, _ in log] == [0] * 5 + [1] * 5  # the second waits for the only batch slot
    assert clock.decode_steps == 8 and clock.avg_accept_length() == 1.0  # 2 prefill steps emit the first tokens


def test_speculative_steps_draw_accept_lengths_and_report_their_mean() -> None:
    clock = StepClock(PerfModel(PerfParams(speedup=1000, seed=3), EAGLE, max_running=None))
    log: list[tuple[int, int]] = []

    async def main() -> None:
        await asyncio.gather(*(_decode(clock, 10, 300, log, i) for i in range(4)))

    asyncio.run(main())
    draws = [n for _, n in log[4:]]
    assert set(draws) <= {1, 2, 3, 4} and max(draws) == 4
    assert 2.5 < clock.avg_accept_length() < 3.3


def test_step_time_follows_the_model_and_the_speedup() -> None:
    # baseline, B=1: 12 + 0.25 ms a step; 40 steps at speedup 4 -> ~0.12 s of wall time
    model = PerfModel(PerfParams(speedup=4), None, None)
    wall = asyncio.run(_decode(StepClock(model), 0, 40, [], 0))
    expected = 40 * model.step_ms(1, 0) / 1000 / 4
    assert expected * 0.9 < wall < expected * 3 + 0.5  # generous: a busy 2-core CI machine
    fixed = asyncio.run(_decode(StepClock(model, fixed_step_s=0.0), 0, 40, [], 0))
    assert fixed < wall
