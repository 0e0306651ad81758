"""verify knows the model family (docs/families.md): which family the server serves (the profile's, else the served
model's name or path), which probes apply to it, and the probe of K2.6's ``preserve_thinking`` switch.

- A thinking-only model (Kimi-K2.7-Code) is not judged on the instant probes: it has no instant mode, so an answer
  with reasoning there is the model's, not a fault. Probes that turn thinking off only to be quick keep it on.
- ``preserve_thinking``: the same multi-turn history, its earlier assistant turn with and without reasoning, twice:
  the prompt the server reports (``usage.prompt_tokens``) is longer with the reasoning when the template keeps it, the
  same when it drops it. Once with the server's default (the profile's ``model.preserve_thinking``, the server's
  ``default_chat_template_kwargs``, else the family's own default) and, where the switch is free, once asking the
  opposite per request.
"""

from __future__ import annotations

import dataclasses
import time
from functools import partial
from typing import Any

from kimi_serve.core.family import DEFAULT, ModelFamily, by_model_name, family
from kimi_serve.core.findings import Finding
from kimi_serve.verify.agentic import DIALECT_PROBES
from kimi_serve.verify.answer import as_object, json_int
from kimi_serve.verify.discovery import fetch_json, post
from kimi_serve.verify.probes import NON_STREAM, Probe
from kimi_serve.verify.raw_suite import RawCall
from kimi_serve.verify.report import ProbeResult, problem

PRESERVE = "preserve-thinking"
_REASONING = (
    "The user asked me to remember one word for later turns: PLUM. I will keep it in mind and answer briefly, "
    "since nothing else was asked of me in this turn."
)


def resolve_family(name: str | None, model: str | None, model_path: str | None = None) -> ModelFamily:
    """The family verify judges by: ``name`` (from --profile), else the one the served model's name or path spells,
    else Kimi-K2.5."""
    if name:
        return family(name)
    for spelled in (model, model_path):
        found = by_model_name(spelled) if spelled else None
        if found is not None:
            return found
    return family(DEFAULT)


def for_family(probes: tuple[Probe, ...], fam: ModelFamily) -> tuple[Probe, ...]:
    """The probes that apply to ``fam``: a thinking-only model keeps no instant probe, and no probe turns its
    thinking off."""
    if not fam.thinking_only:
        return probes
    instant = set(DIALECT_PROBES.values())
    return tuple(
        dataclasses.replace(p, template_kwargs=None) if p.template_kwargs else p
        for p in probes
        if p.name not in instant
    )


def _history(reasoning: bool) -> list[dict[str, Any]]:
    said = {"role": "assistant", "content": "Noted: PLUM."}
    return [
        {"role": "user", "content": "Remember the word PLUM. Reply with one short line."},
        {**said, "reasoning_content": _REASONING} if reasoning else said,
        {"role": "user", "content": "Which word did I ask you to remember? One word."},
    ]


def _kept(
    target: Any, model: str, kwargs: dict[str, Any] | None, api_key: str | None, deadline: float, timeout: float
) -> tuple[bool | None, Finding | None]:
    """Whether the server's prompt keeps the earlier reasoning (None and the finding when it cannot tell)."""
    sizes = []
    for reasoning in (True, False):
        body: dict[str, Any] = {"model": model, "messages": _history(reasoning), "max_tokens": 1, "temperature": 1.0}
        if kwargs:
            body["chat_template_kwargs"] = kwargs
        posted = post(target, "/v1/chat/completions", body, api_key=api_key, deadline=deadline, timeout=timeout)
        if posted.failure is not None:
            return None, posted.failure
        n = json_int(as_object(as_object(posted.data).get("usage")).get("prompt_tokens"))
        if n is None:
            return None, problem(
                "usage_missing",
                "the answer has no usage.prompt_tokens: cannot tell whether the prompt kept earlier reasoning",
                "point --host at SGLang itself (a proxy that strips usage hides it)",
            )
        sizes.append(n)
    return sizes[0] > sizes[1], None


def expected_preserve(fam: ModelFamily, configured: bool | None, server_default: Any) -> bool:
    forced = dict(fam.forced).get("preserve_thinking")
    if forced is not None:
        return forced
    if configured is not None:
        return configured
    if isinstance(server_default, dict) and isinstance(server_default.get("preserve_thinking"), bool):
        return bool(server_default["preserve_thinking"])
    return False


def run_preserve_probe(
    probe: Probe,
    target: Any,
    fam: ModelFamily,
    *,
    model: str,
    configured: bool | None,
    api_key: str | None,
    deadline: float,
    timeout: float,
) -> ProbeResult:
    start = time.monotonic()
    server_default = None
    if configured is None:
        info = as_object(fetch_json(target, "/server_info", deadline, api_key))
        server_default = info.get("default_chat_template_kwargs")
    want = expected_preserve(fam, configured, server_default)
    checks: list[tuple[dict[str, Any] | None, bool, str]] = [(None, want, "by default")]
    if "preserve_thinking" not in dict(fam.forced):
        checks.append(({"preserve_thinking": not want}, not want, f"with preserve_thinking: {str(not want).lower()}"))
    findings = []
    for kwargs, expect, how in checks:
        kept, failure = _kept(target, model, kwargs, api_key, deadline, timeout)
        if failure is not None:
            return ProbeResult(probe.name, NON_STREAM, time.monotonic() - start, (failure,))
        if kept != expect:
            findings.append(
                problem(
                    "preserve_thinking",
                    f"{fam.title} {how}: earlier turns' reasoning is {'kept' if kept else 'dropped'} in the prompt, "
                    f"expected {'kept' if expect else 'dropped'}",
                    "serve the checkpoint's own chat template; set model.preserve_thinking (rendered as "
                    "--default-chat-template-kwargs) to the behaviour clients expect",
                )
            )
    detail = f"earlier reasoning {'kept' if want else 'dropped'} by default"
    return ProbeResult(probe.name, NON_STREAM, time.monotonic() - start, tuple(findings), detail=detail)


def family_calls(
    fam: ModelFamily,
    target: Any,
    *,
    model: str,
    configured: bool | None,
    api_key: str | None,
    deadline: float,
    timeout: float,
    max_tokens: int | None = None,
) -> list[RawCall]:
    """What the runner adds to a chat suite beside the raw probes: the token accounting (verify/accounting.py) and,
    where the family has the switch, the preserve_thinking probe."""
    from kimi_serve.verify.accounting import PROBE, run_accounting_probe

    how: dict[str, Any] = {"model": model, "api_key": api_key, "deadline": deadline, "timeout": timeout}
    calls: list[RawCall] = [(PROBE, NON_STREAM, partial(run_accounting_probe, target, **how, max_tokens=max_tokens))]
    if "preserve_thinking" not in fam.switches:
        return calls
    probe = Probe(PRESERVE, _history(True), lambda _a, _s: [], modes=(NON_STREAM,))
    return [*calls, (probe, NON_STREAM, partial(run_preserve_probe, probe, target, fam, **how, configured=configured))]
