"""The simulator's scheduler clock: one step loop for all running requests, paced by the performance model (perf.py),
as SGLang's scheduler runs one batch per step (docs/simulator.md, "Performance model"). Steps are scheduled on
absolute deadlines, so the requests' own work between steps overlaps the wait. ``fixed_step_s``
(``KIMI_SERVE_SIM_STEP_SECONDS``; the contract dry run drops the pacing with it) replaces the model's step time; the
tokens per step still come from the model.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from kimi_serve.simulator.perf import PerfModel


@dataclass(eq=False)
class Slot:
    prompt_tokens: int
    context: int = 0
    prefilled: bool = False
    grant: asyncio.Future[int] | None = None
    waiting: list[int] = field(default_factory=list)  # tokens granted but not yet taken
    verify_ct: int = 0  # decode (verify) steps this request took part in
    correct: int = 0  # draft tokens those steps accepted (each step's tokens less its bonus token)


class StepClock:
    def __init__(self, model: PerfModel, fixed_step_s: float | None = None) -> None:
        self.model = model
        self.fixed_step_s = fixed_step_s
        self.running: list[Slot] = []
        self.queue: list[Slot] = []
        self.decode_steps = 0  # request-steps that decoded (accept-length denominator)
        self.accepted = 0  # tokens those request-steps produced
        self._task: asyncio.Task[None] | None = None

    def join(self, prompt_tokens: int) -> Slot:
        slot = Slot(prompt_tokens, context=prompt_tokens)
        self.queue.append(slot)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        return slot

    def leave(self, slot: Slot) -> None:
        if slot in self.running:
            self.running.remove(slot)
        if slot in self.queue:
            self.queue.remove(slot)
        if slot.grant is not None and not slot.grant.done():
            slot.grant.cancel()

    async def tokens(self, slot: Slot) -> int:
        """Wait for the next step that includes ``slot``; the number of tokens it produced for it."""
        if slot.waiting:
            return slot.waiting.pop(0)
        slot.grant = asyncio.get_running_loop().create_future()
        return await slot.grant

    def avg_accept_length(self) -> float:
        """Cumulative mean tokens per decode step, as SGLang's ``avg_spec_accept_length`` (decode steps only)."""
        return self.accepted / self.decode_steps if self.decode_steps else self.model.mean_accept()

    async def _run(self) -> None:
        next_at = time.monotonic()
        limit = self.model.max_running
        while self.running or self.queue:
            room = len(self.queue) if limit is None else max(0, limit - len(self.running))
            new, self.queue = self.queue[:room], self.queue[room:]
            self.running += new
            decoding = [s for s in self.running if s.prefilled]
            if self.fixed_step_s is not None:
                seconds = self.fixed_step_s
            else:
                ctx = sum(s.context for s in decoding) / len(decoding) if decoding else 0.0
                ms = self.model.step_ms(len(decoding), ctx, sum(s.prompt_tokens for s in new))
                seconds = ms / 1000 / self.model.params.speedup
            # the step starts when the last one ended (or now, if the CPU fell behind): absolute deadlines
            next_at = max(next_at, time.monotonic()) + seconds
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            for slot in list(self.running):
                if slot not in decoding and slot not in new:
                    continue  # joined while this step ran
                if slot.prefilled:
                    n = self.model.draw_accept()
                    self.decode_steps += 1
                    self.accepted += n
                    slot.verify_ct += 1
                    slot.correct += n - 1
                else:
                    slot.prefilled, n = True, 1
                slot.context += n
                if slot.grant is not None and not slot.grant.done():
                    slot.grant.set_result(n)
                    slot.grant = None
                else:
                    slot.waiting.append(n)
        self._task = None
