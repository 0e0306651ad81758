"""One chat answer -> one record (or a reject with its cause), and the run's books. Pure: no I/O.

A record is SpecForge's pre-tokenized form plus ``meta``: ``input_ids`` is the prompt's ids then the output's, exactly
as the server returned them in ``sglext`` (``return_input_ids_in_sglext`` / ``return_output_ids_in_sglext``), the stop
id included when the answer stopped; ``loss_mask`` is 0 over the prompt and 1 over the output. Before it is kept, the
lossless check: Kimi's raw text rebuilt from the parsed fields (``reasoning_content``, ``content``, ``tool_calls``:
verify's reassembly, :func:`kimi_serve.verify.kimi_format.rebuild_raw`) must equal the output ids decoded with every
special token kept (the server's own ``/v1/detokenize``). A record that fails is a reject naming where they part.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kimi_serve.capture.prompts import Prompt
from kimi_serve.verify import kimi_format as kf

TOOL_CALL, PROSE = "tool_call", "prose"


@dataclass(frozen=True)
class Reject:
    id: str
    cause: str  # a short code: http_500, unreachable, no_ids, lossless_mismatch, ...
    message: str

    def as_row(self, line: int) -> dict[str, Any]:
        """Its line in rejects.jsonl (docs/capture.md), ``line``: the prompt's line in the prompts file."""
        return {"id": self.id, "line": line, "cause": self.cause, "reason": self.message}


@dataclass(frozen=True)
class ServedIds:
    """What the record needs of one chat answer: its message, the ids and the decoded output (``text``)."""

    message: dict[str, Any]
    finish_reason: Any
    usage: Any
    input_ids: list[int]
    output_ids: list[int]
    spec: dict[str, Any] | None


def _ids(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value):
        return value
    return None


def read_answer(prompt: Prompt, data: Any) -> ServedIds | Reject:
    """The parts of a chat completion a record needs, or why there are none."""
    choices = data.get("choices") if isinstance(data, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    message = choice.get("message") if choice else None
    if not isinstance(message, dict):
        return Reject(prompt.id, "malformed", "the answer has no choices[0].message")
    ext = data.get("sglext") if isinstance(data.get("sglext"), dict) else {}
    outputs = ext.get("output_ids")
    input_ids = _ids(ext.get("input_ids"))
    output_ids = _ids(outputs[0]) if isinstance(outputs, list) and outputs else None
    if not input_ids or output_ids is None:
        return Reject(
            prompt.id,
            "no_ids",
            "the answer has no sglext.input_ids/output_ids: the server is not SGLang 0.5.23's chat endpoint, or a "
            "proxy drops sglext (point --host at SGLang itself)",
        )
    if not output_ids:
        return Reject(prompt.id, "empty_output", "the model generated no token (nothing to train on)")
    spec = ext.get("spec_tokens_details")
    if isinstance(spec, list):
        spec = spec[0] if spec and isinstance(spec[0], dict) else None
    return ServedIds(
        message, choice.get("finish_reason") if choice else None, data.get("usage"), input_ids, output_ids, spec
    )


def text_ids(answer: ServedIds) -> list[int]:
    """The output ids the message's text was decoded from: without the stop id the server matched (SGLang trims the
    stop token from the text, not from the ids)."""
    ids = answer.output_ids
    return ids[:-1] if ids and ids[-1] in kf.STOP_IDS else ids


def lossless(prompt: Prompt, answer: ServedIds, decoded: str) -> Reject | None:
    """None when the parsed fields rebuild the decoded output ids exactly; else the reject saying where they part."""
    message = answer.message
    reasoning: str | None = next(
        (message[k] for k in ("reasoning_content", "reasoning") if isinstance(message.get(k), str)), None
    )
    content: str = message["content"] if isinstance(message.get("content"), str) else ""
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    if kf.THINK_END_ID not in answer.output_ids and reasoning is not None:
        # the reasoning never closed (cut at max_tokens, or a tool section opened with no </think>): the parser's
        # reasoning is the raw text's start, with no </think> after it
        content = reasoning + content
        reasoning = None
    rebuilt = kf.rebuild_raw(reasoning, content, calls, thinking=prompt.thinking)
    if rebuilt == decoded:
        return None
    return Reject(
        prompt.id,
        "lossless_mismatch",
        f"the text rebuilt from reasoning_content/content/tool_calls differs from the output ids decoded: "
        f"{kf.describe_difference(decoded, rebuilt)}",
    )


def kind_of(answer: ServedIds) -> str:
    return TOOL_CALL if answer.message.get("tool_calls") else PROSE


def build_record(prompt: Prompt, answer: ServedIds, source: dict[str, Any]) -> dict[str, Any]:
    """The record: SpecForge's ``input_ids`` + ``loss_mask``, and ``meta`` (``source``: profile, server, model)."""
    calls = answer.message.get("tool_calls") or []
    reasoning = answer.message.get("reasoning_content")
    meta = {
        "line": prompt.line,
        "finish_reason": answer.finish_reason,
        "usage": answer.usage,
        "reasoned": kf.THINK_END_ID in answer.output_ids or bool(reasoning),
        "calls": len(calls) if isinstance(calls, list) else 0,
        "kind": kind_of(answer),
        "prompt_tokens": len(answer.input_ids),
        "output_tokens": len(answer.output_ids),
        "stopped": bool(answer.output_ids) and answer.output_ids[-1] in kf.STOP_IDS,
        "acceptance": answer.spec,
        **source,
    }
    return {
        "id": prompt.id,
        "input_ids": answer.input_ids + answer.output_ids,
        "loss_mask": [0] * len(answer.input_ids) + [1] * len(answer.output_ids),
        "meta": meta,
    }


@dataclass
class Books:
    """The run's summary: records, tokens, the draft's acceptance by kind of turn, failures by cause."""

    total: int = 0  # prompts selected (after --limit)
    earlier: int = 0  # records already in the file when the run began
    written: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    tokens_by_kind: Counter[str] = field(default_factory=Counter)  # output tokens of records with acceptance
    verify_by_kind: Counter[str] = field(default_factory=Counter)  # the draft's verify steps of those
    records_by_kind: Counter[str] = field(default_factory=Counter)

    def add_record(self, record: dict[str, Any]) -> None:
        meta = record["meta"]
        self.written += 1
        self.prompt_tokens += meta["prompt_tokens"]
        self.output_tokens += meta["output_tokens"]
        self.records_by_kind[meta["kind"]] += 1
        spec = meta.get("acceptance") or {}
        steps = spec.get("spec_verify_ct") if isinstance(spec, dict) else None
        if isinstance(steps, int) and steps > 0:
            self.verify_by_kind[meta["kind"]] += steps
            self.tokens_by_kind[meta["kind"]] += meta["output_tokens"]

    def add_reject(self, reject: Reject) -> None:
        self.failures[reject.cause] += 1

    @property
    def done(self) -> int:
        return self.earlier + self.written

    def acceptance(self) -> dict[str, float | None]:
        """Mean accepted tokens per verify step, by kind of turn (None: no record of that kind had the draft's
        numbers: speculative decoding off, or not returned)."""
        return {
            kind: round(self.tokens_by_kind[kind] / self.verify_by_kind[kind], 3) if self.verify_by_kind[kind] else None
            for kind in (TOOL_CALL, PROSE)
        }

    def summary(self) -> dict[str, Any]:
        """capture's ``data`` (docs/json.md): the prompts, the records (all, this run's, earlier runs'), the rejects,
        this run's tokens, the records and the draft's acceptance by kind of turn, the failures by cause."""
        return {
            "prompts": self.total,
            "records": self.done,
            "written": self.written,
            "earlier": self.earlier,
            "rejected": sum(self.failures.values()),
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "records_by_kind": {k: self.records_by_kind[k] for k in (TOOL_CALL, PROSE)},
            "acceptance_by_kind": self.acceptance(),
            "failures": dict(sorted(self.failures.items())),
        }

    def lines(self) -> list[str]:
        acc = self.acceptance()
        shown = ", ".join(f"{k} {'-' if v is None else v}" for k, v in acc.items())
        out = [
            f"records: {self.done} of {self.total} prompts ({self.written} written now, {self.earlier} earlier)",
            f"tokens (this run): {self.prompt_tokens} prompt, {self.output_tokens} output "
            f"({self.records_by_kind[TOOL_CALL]} tool-call turns, {self.records_by_kind[PROSE]} prose)",
            f"draft acceptance (tokens per verify step): {shown}",
        ]
        if self.failures:
            out.append(
                "failed: "
                + ", ".join(f"{n} {cause}" for cause, n in sorted(self.failures.items()))
                + " (in rejects.jsonl; the same command retries them)"
            )
        return out
