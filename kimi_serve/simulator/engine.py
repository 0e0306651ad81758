"""The scripted stand-in for SGLang's TokenizerManager + scheduler: what ``OpenAIServingChat`` talks to.

It answers ``generate_request`` as the real detokenizer does: cumulative decoded text, token-aligned, several tokens
per step with speculative decoding (perf.py's draws, clock.py's pacing), ``meta_info`` with usage and a finish reason
matching the stop id ``<|im_end|>`` (163586). The text comes from model.py.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import itertools
import os
import types
import uuid
from collections.abc import AsyncIterator
from typing import Any

from kimi_serve.core.settings import SIM_ACCEPT_ENV, SIM_PERF_ENV, SIM_SPEEDUP_ENV, SIM_STEP_ENV, sim_number
from kimi_serve.simulator import model as scripted
from kimi_serve.simulator.clock import StepClock
from kimi_serve.simulator.constrain import Constrainer, has_constraint, intended_text
from kimi_serve.simulator.perf import PerfModel, PerfParams, SpecSettings
from kimi_serve.simulator.prompt import read_prompt
from kimi_serve.simulator.schema_strings import FILLER
from kimi_serve.simulator.schema_values import MAX_SECONDS
from kimi_serve.simulator.stops import find_stop, holds_back
from kimi_serve.simulator.validate import RequestChecks

STOP_TOKEN_ID = 163586  # <|im_end|>
GENERATE_SECONDS = MAX_SECONDS + 5.0  # the scripted model's turn, at most (its budget ends it after MAX_SECONDS)
CHAT_REQUEST_KEY = "kimi_serve_chat_request"  # where the HTTP layer leaves the parsed request on raw_request.state


async def generate_off_loop(turn: scripted.Turn) -> str:
    """The scripted model's text, written in a worker thread so the event loop (``/health``, other streams, SIGTERM)
    never waits on it. Its own budget (schema_values.ArgumentBudget) ends a costly turn with a ValueError, SGLang's 400;
    ``GENERATE_SECONDS`` is the backstop, answered the same way (the thread then ends on that budget)."""
    try:
        return await asyncio.wait_for(asyncio.to_thread(scripted.generate, turn), GENERATE_SECONDS)
    except TimeoutError:
        raise ValueError(
            f"the simulator's scripted model did not finish this request within {GENERATE_SECONDS:g} s "
            "(a tool schema too costly to fill?); send smaller tool schemas"
        ) from None


def normalize_once(obj: Any) -> None:
    """SGLang's ``normalize_batch_and_arguments`` (what ``TokenizerManager.generate_request`` does first), once: a
    second call on a request it turned into parallel samples (``n`` > 1) fails."""
    if not obj.__dict__.get("_kimi_serve_normalized"):
        obj.normalize_batch_and_arguments()
        obj.__dict__["_kimi_serve_normalized"] = True


def step_delay() -> float | None:
    """A fixed step time (KIMI_SERVE_SIM_STEP_SECONDS), or None: the performance model times the steps."""
    return sim_number(os.environ, SIM_STEP_ENV)


def perf_params() -> PerfParams:
    """The performance model's parameters from the environment (KimiServeError or ValueError when they are bad):
    KIMI_SERVE_SIM_PERF, then KIMI_SERVE_SIM_ACCEPT_LENGTH (the stand-in draft's mean accept length) over it."""
    speedup = sim_number(os.environ, SIM_SPEEDUP_ENV)
    params = PerfParams.from_json(os.environ.get(SIM_PERF_ENV), None if speedup is None else repr(speedup))
    accept = sim_number(os.environ, SIM_ACCEPT_ENV)
    return params if accept is None else dataclasses.replace(params, accept_length=accept)


def spec_meta(spec: SpecSettings, completion_tokens: int, verify_ct: int, correct: int) -> dict[str, Any]:
    """The speculative figures SGLang's TokenizerManager puts in a request's ``meta_info`` (the OpenAI layer copies
    them into ``sglext.spec_tokens_details``): its formulas, over this request's verify steps."""
    proposed = verify_ct * (spec.draft_tokens - 1)
    return {
        "spec_accept_rate": correct / proposed if proposed else 0.0,
        "spec_accept_length": completion_tokens / verify_ct,
        "spec_num_correct_drafts": correct,
        "spec_num_proposed_drafts": proposed,
        "spec_verify_ct": verify_ct,
    }


def stand_in_acceptance(accept_length: float) -> str:
    """What the simulator says about its draft's acceptance: a stand-in figure of the performance model, not a draft."""
    kind = "dead" if accept_length <= 1.0 else "weak" if accept_length < 2.0 else "healthy"
    return f"STAND-IN draft: the performance model's accept_length {accept_length:g}, a {kind} draft"


class ScriptedTokenizerManager:
    """Duck-types the parts of ``sglang.srt.managers.tokenizer_manager.TokenizerManager`` the OpenAI layer reads."""

    def __init__(self, server_args: Any, model_config: Any, tokenizer: Any, model_path: str) -> None:
        self.server_args = server_args
        self.model_config = model_config
        self.tokenizer = tokenizer
        self.processor = None
        self.model_path = model_path
        self.served_model_name = server_args.served_model_name
        self.is_generation = True
        self.request_logger = types.SimpleNamespace(log_requests=False, log_requests_level=0)
        self._resolved = server_args.resolved_dict()
        spec = SpecSettings.from_server_args(self._resolved)
        perf = PerfModel(perf_params(), spec, self._resolved.get("max_running_requests"))
        self.clock = StepClock(perf, step_delay())
        self.checks = RequestChecks(model_config, tokenizer)
        self.constrainer = Constrainer(model_config, tokenizer, server_args)
        self.generated_tokens = 0  # sglang:generation_tokens_total
        self.verify_calls = 0  # sglang:spec_verify_calls_total

    def internal_states(self) -> list[dict[str, Any]]:
        """``/server_info``'s ``internal_states``: the accept length only with speculative decoding on, as SGLang."""
        state: dict[str, Any] = {
            "simulated": True,
            "perf_model": self.clock.model.describe(),
            "fixed_step_s": self.clock.fixed_step_s,
        }
        if self.clock.model.spec is not None:
            state["avg_spec_accept_length"] = self.clock.avg_accept_length()
        return [state]

    def stand_in_acceptance(self) -> str | None:
        spec = self.clock.model.spec
        return stand_in_acceptance(self.clock.model.params.accept_length) if spec is not None else None

    def spec_metrics(self) -> str:
        """``/metrics`` in Prometheus text, SGLang's names and labels: the ``sglang:generation_tokens_total`` counter,
        and with speculative decoding ``sglang:spec_verify_calls_total`` and the ``sglang:spec_accept_length`` /
        ``spec_accept_rate`` gauges (the cumulative means of this server's verify steps)."""
        spec = self.clock.model.spec
        labels = f'model_name="{self.served_model_name}",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"'
        lines = [
            "# HELP sglang:generation_tokens_total Number of generation tokens processed.",
            "# TYPE sglang:generation_tokens_total counter",
            f'sglang:generation_tokens_total{{{labels},is_streaming="false"}} {float(self.generated_tokens)}',
        ]
        if spec is None:
            return "\n".join(lines) + "\n"
        lines += [
            "# HELP sglang:spec_verify_calls_total The number of speculative verify calls.",
            "# TYPE sglang:spec_verify_calls_total counter",
            f"sglang:spec_verify_calls_total{{{labels}}} {float(self.verify_calls)}",
        ]
        length = self.clock.avg_accept_length()
        rate = (length - 1) / (spec.draft_tokens - 1) if spec.draft_tokens > 1 else 0.0
        for name, value, text in (
            (
                "spec_accept_length",
                length,
                "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
            ),
            ("spec_accept_rate", rate, "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch)."),
        ):
            lines += [
                f"# HELP sglang:{name} {text}",
                f"# TYPE sglang:{name} gauge",
                f"sglang:{name}{{{labels}}} {value}",
            ]
        return "\n".join(lines) + "\n"

    def config_value(self, name: str) -> Any:
        return self._resolved.get(name)

    def create_abort_task(self, obj: Any) -> None:
        return None

    async def generate_request(self, obj: Any, raw_request: Any = None) -> AsyncIterator[Any]:
        """As ``TokenizerManager.generate_request``: SGLang's own normalization first (defaults, rids, ``n`` > 1 as
        parallel samples of one prompt), then per sample SGLang's checks (:mod:`.validate`), the scripted text,
        constrained by SGLang's grammar backend when the sampling params carry a grammar (:mod:`.constrain`)."""
        normalize_once(obj)
        request = getattr(getattr(raw_request, "state", None), CHAT_REQUEST_KEY, None)
        if obj.is_single:
            async for out in self._generate_one(obj, request, obj):
                yield out
            return
        if obj.batch_size != 1:
            raise ValueError("the kimi-serve simulator serves one prompt per request (no batches)")
        from sglang.srt.managers.tokenizer_manager import TokenizerManager

        base = obj[0]
        generators, rids = [], []
        for _ in range(obj.parallel_sample_num):  # n samples of the one prompt, each with its own rid
            sample = copy.copy(base)
            sample.regenerate_rid()
            generators.append(self._generate_one(sample, request, obj))
            rids.append(sample.rid)
        if not obj.stream:
            yield await TokenizerManager._collect_batch_responses(self, generators)
        else:
            async for out in TokenizerManager._stream_batch_responses(self, generators, rids):
                yield out

    async def _generate_one(self, obj: Any, request: Any, parent: Any) -> AsyncIterator[dict[str, Any]]:
        if obj.input_ids is None and isinstance(obj.text, str):  # /generate text, /v1/completions: tokenize here
            obj.input_ids = self.tokenizer.encode(obj.text)
        prompt_ids = list(obj.input_ids or [])
        params = self.checks.sampling_params(obj, prompt_ids)  # SGLang's ValueErrors: the serving layer's 400
        turn = self._turn(request, prompt_ids)
        text = await generate_off_loop(turn)
        limit = params.max_new_tokens
        rid = obj.rid if isinstance(obj.rid, str) else uuid.uuid4().hex
        prompt_out = prompt_ids if getattr(obj, "return_prompt_token_ids", False) else None
        matched: int | str | None = STOP_TOKEN_ID
        grammar = abort = None
        if has_constraint(params) or self.constrainer.strict_thinking():
            grammar, abort = await asyncio.to_thread(
                self.constrainer.grammar, params, prompt_ids, bool(getattr(parent, "require_reasoning", False))
            )
        if abort is not None:  # SGLang's scheduler aborts it: 400 before a stream starts, an error chunk in one
            if not obj.stream:
                raise ValueError(abort["message"])
            yield self._output(rid, "", [], prompt_ids, 0, True, prompt_out, abort=abort)
            return
        if grammar is not None:
            intended = await asyncio.to_thread(
                lambda: self.tokenizer.encode(intended_text(text, params), add_special_tokens=False)
            )
            # no max_tokens: the scheduler's bound, what the context leaves (a grammar may never end on its own)
            bound = limit if limit is not None else max(0, self.checks.context_len - len(prompt_ids))
            ids, matched = await asyncio.to_thread(self.constrainer.decode, grammar, intended, bound)
        else:
            ids = await asyncio.to_thread(self.tokenizer.encode, text, add_special_tokens=False)  # up to ~1 MiB
            if params.ignore_eos and limit:  # benchmarks: no stop token, generate exactly max_new_tokens
                filler = self.tokenizer.encode(" " + FILLER, add_special_tokens=False)
                ids = ids + list(itertools.islice(itertools.cycle(filler), max(0, limit - len(ids) + 1)))
            if limit is not None and len(ids) > limit:
                ids, matched = ids[:limit], None
        # skip_special_tokens removes the tokenizer's declared special tokens, as Kimi's own tokenizer decodes:
        # </think> and the tool markers are not among them, so they survive the default, as on SGLang with Kimi-K2.5
        skip = frozenset(self.tokenizer.all_special_ids) if params.skip_special_tokens else frozenset()
        final_text = None
        stopped = find_stop(self.tokenizer, ids, params, skip) if params.stop_strs or params.stop_token_ids else None
        if stopped is not None:  # the request's own stop string or stop token, as SGLang's scheduler finds it
            ids, matched, final_text = stopped.ids, stopped.matched, stopped.text
        reasoning_ids = self._reasoning_token_count(ids) if turn.thinking else 0
        done, decoded_upto, emitted = 0, 0, ""
        slot = self.clock.join(len(prompt_ids))
        try:
            while done < len(ids):
                granted = await self.clock.tokens(slot)
                done = min(len(ids), done + granted)
                last = done == len(ids)
                # Incremental detokenization, as SGLang's detokenizer does it: decode only the new tokens; hold back
                # an incomplete UTF-8 sequence until the next step completes it.
                piece = self.tokenizer.decode(
                    [i for i in ids[decoded_upto:done] if i not in skip], skip_special_tokens=False
                )
                if piece.endswith("\ufffd") and not last:
                    continue
                emitted, decoded_upto = emitted + piece, done
                if last and final_text is not None:
                    emitted = final_text
                if (obj.stream and not holds_back(emitted, params)) or last:
                    out = self._output(rid, emitted, ids[:done], prompt_ids, reasoning_ids, last, prompt_out, matched)
                    if last:  # SGLang's counters, as its metrics collector adds a finished request
                        self.generated_tokens += len(out["output_ids"])
                        self.verify_calls += slot.verify_ct
                    if self.clock.model.spec is not None and slot.verify_ct:
                        meta = out["meta_info"]
                        meta.update(
                            spec_meta(self.clock.model.spec, meta["completion_tokens"], slot.verify_ct, slot.correct)
                        )
                    yield out
        finally:
            self.clock.leave(slot)
        if not ids:
            yield self._output(rid, "", [], prompt_ids, 0, True, prompt_out, matched)

    def _output(
        self,
        rid: str,
        text: str,
        ids: list[int],
        prompt_ids: list[int],
        reasoning: int,
        last: bool,
        prompt_out: list[int] | None = None,
        matched: int | str | None = STOP_TOKEN_ID,
        abort: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        finish: dict[str, Any] | None = None
        output_ids = list(ids)
        if abort is not None:
            finish = abort
        elif last:
            if matched is None:
                finish = {"type": "length", "length": len(ids)}
            else:
                finish = {"type": "stop", "matched": matched}
                if isinstance(matched, int):  # a stop token counts as generated; a stop string's tokens are in ids
                    output_ids.append(matched)
        meta = {
            "id": rid,
            "finish_reason": finish,
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": len(output_ids),
            "cached_tokens": 0,
            "reasoning_tokens": reasoning,
            "weight_version": self._resolved.get("weight_version") or "default",
        }
        out = {"text": text, "output_ids": output_ids, "index": 0, "meta_info": meta}
        if prompt_out is not None:
            out["prompt_token_ids"] = list(prompt_out)
        return out

    def _reasoning_token_count(self, ids: list[int]) -> int:
        end_id = self.tokenizer.convert_tokens_to_ids(scripted.THINK_END)
        return ids.index(end_id) if end_id in ids else len(ids)  # cut off (max_tokens) while still reasoning

    def _turn(self, request: Any, prompt_ids: list[int]) -> scripted.Turn:
        # thinking, as the model sees it: the prompt ends with <think> (think) or <think></think> (answer directly)
        thinking = (
            not self.tokenizer.decode(prompt_ids[-4:], skip_special_tokens=False).rstrip().endswith(scripted.THINK_END)
        )
        if request is None:  # /generate, /v1/completions: the model reads its rendered prompt
            messages, tools = read_prompt(self.tokenizer.decode(prompt_ids, skip_special_tokens=False))
            return scripted.Turn(messages, tools, "auto", thinking)
        tool_choice = getattr(request, "tool_choice", "auto")
        return scripted.Turn(
            [m.model_dump(exclude_none=True) for m in request.messages],
            [t.model_dump(exclude_none=True) for t in (request.tools or [])],
            tool_choice.model_dump(exclude_none=True) if hasattr(tool_choice, "model_dump") else tool_choice,
            thinking,
        )
