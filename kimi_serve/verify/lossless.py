"""The lossless check (`verify --suite full`): one prompt on the parsed path (``/v1/chat/completions``) and on the raw
path (``/generate``), greedy with one seed; Kimi's raw text rebuilt from ``reasoning_content``, ``content`` and
``tool_calls`` must equal the raw output, or the finding says where they part.

The chat request asks SGLang for its prompt and output ids (``return_input_ids_in_sglext`` /
``return_output_ids_in_sglext``), so ``/generate`` gets the exact prompt ids the chat template produced and the two
runs' tokens can be compared id for id first: when they differ the server was not deterministic and the check says so
instead of blaming a parser. Where the server returns no ids, the prompt is rendered here and only text is compared.
"""

from __future__ import annotations

from typing import Any

from kimi_serve.core.findings import Finding
from kimi_serve.verify import kimi_format as kf
from kimi_serve.verify.answer import as_object
from kimi_serve.verify.discovery import Posted, post
from kimi_serve.verify.probes import REASONING, TOOL, Probe
from kimi_serve.verify.raw import MAX_NEW_TOKENS, SEED, generate_body
from kimi_serve.verify.report import ProbeResult, problem

MODE = "chat+generate"
LOSSLESS_PROBES = (
    Probe("lossless-reasoning", REASONING.messages, REASONING.check, modes=(MODE,)),
    Probe("lossless-tool", TOOL.messages, TOOL.check, modes=(MODE,), tools=TOOL.tools),
)
FIX_DETERMINISM = (
    "rerun; for repeatable greedy output start SGLang with --enable-deterministic-inference, or "
    "capture training data from /generate alone (docs/raw-path.md)"
)


def chat_body(probe: Probe, model: str) -> dict[str, Any]:
    body = probe.body(model, stream=False)
    body.update(
        temperature=0.0,
        seed=SEED,
        max_tokens=MAX_NEW_TOKENS,
        return_input_ids_in_sglext=True,
        return_output_ids_in_sglext=True,
    )
    return body


def reasoning_fields(message: dict[str, Any]) -> str:
    """One line: which message field carries the reasoning and what common clients read (the seeds' "empty
    reasoning")."""
    has = [k for k in ("reasoning_content", "reasoning") if isinstance(message.get(k), str) and message[k]]
    if has == ["reasoning_content"]:
        return (
            "reasoning arrives in message.reasoning_content only: raw JSON choices[0].message.reasoning_content, "
            "openai SDK message.model_extra['reasoning_content'] (no typed attribute), litellm "
            "message.reasoning_content; a client reading `reasoning` (vLLM's newer name) gets empty reasoning"
        )
    if has == ["reasoning"]:
        return (
            "reasoning arrives in message.reasoning only (not SGLang's reasoning_content): openai SDK "
            "message.model_extra['reasoning']; a client reading reasoning_content gets empty reasoning"
        )
    if has:
        return "reasoning arrives in both message.reasoning_content and message.reasoning: every client finds it"
    content = message.get("content")
    content = content if isinstance(content, str) else ""
    where = "inside content, before </think>" if kf.THINK_END in content else "nowhere in the message"
    return (
        f"no reasoning field: the reasoning is {where} (the server parses no reasoning: --reasoning-parser "
        "kimi_k2); every client reads empty reasoning"
    )


def _mismatch(raw: str, rebuilt: str, ids_note: str) -> Finding:
    text = kf.describe_difference(raw, rebuilt)
    change = "alter whitespace" if "whitespace" in text else "lose or change text"
    fix = f"the parsed fields {change}: train on /generate output_ids (docs/raw-path.md)"
    return problem(
        "lossless_mismatch",
        f"text rebuilt from reasoning_content/content/tool_calls differs from the raw /generate text{ids_note}: {text}",
        fix + "; check --reasoning-parser/--tool-call-parser kimi_k2 and anything between the client and SGLang",
    )


def compare(chat: dict[str, Any], raw: dict[str, Any], *, thinking: bool, exact_prompt: bool) -> list[Finding]:
    """Findings for one chat answer against one /generate answer of the same prompt (empty: lossless)."""
    choices = chat.get("choices") if isinstance(chat.get("choices"), list) else []
    message = as_object(as_object(choices[0]).get("message")) if choices else {}
    text, gen_ids = raw.get("text"), raw.get("output_ids")
    if not message or not isinstance(text, str):
        return [
            problem(
                "lossless_malformed",
                "the chat answer has no message or /generate no text",
                "point --host at SGLang itself",
            )
        ]
    out_ids = (as_object(chat.get("sglext")).get("output_ids") or [None])[0]
    if isinstance(out_ids, list) and isinstance(gen_ids, list):
        at = kf.first_difference(out_ids, gen_ids)
        if at is not None:
            prompt = "the same prompt ids" if exact_prompt else "prompts rendered separately"
            return [
                problem(
                    "lossless_nondeterministic",
                    f"greedy runs with seed {SEED} on {prompt} generated "
                    f"different tokens (from token {at}: chat {kf.id_name(_at(out_ids, at))}, /generate "
                    f"{kf.id_name(_at(gen_ids, at))}): the server is not deterministic here, so losslessness "
                    "cannot be judged",
                    FIX_DETERMINISM,
                )
            ]
        ids_note = f" ({len(gen_ids)} tokens identical on both paths)"
    else:
        ids_note = " (the server returned no chat output ids: text compared, not tokens)"
    reasoning = message.get("reasoning_content")
    if not isinstance(reasoning, str):
        reasoning = message.get("reasoning") if isinstance(message.get("reasoning"), str) else None
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    calls = [as_object(c) for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    rebuilt = kf.rebuild_raw(reasoning, content, calls, thinking=thinking)
    return [] if rebuilt == text else [_mismatch(text, rebuilt, ids_note)]


def _at(ids: list[int], i: int) -> int | None:
    return ids[i] if i < len(ids) else None


def run_lossless_probe(
    probe: Probe, target: Any, *, model: str, api_key: str | None, deadline: float, timeout: float
) -> ProbeResult:
    chat = post(
        target, "/v1/chat/completions", chat_body(probe, model), api_key=api_key, deadline=deadline, timeout=timeout
    )
    if chat.failure is not None or not isinstance(chat.data, dict):
        return _failed(probe, chat)
    input_ids = as_object(chat.data.get("sglext")).get("input_ids")
    exact = isinstance(input_ids, list) and bool(input_ids)
    raw = post(
        target,
        "/generate",
        generate_body(probe, input_ids=input_ids if exact else None),
        api_key=api_key,
        deadline=deadline,
        timeout=timeout,
    )
    latency = chat.latency_s + raw.latency_s
    if raw.failure is not None or not isinstance(raw.data, dict):
        return _failed(probe, raw, latency)
    thinking = (probe.template_kwargs or {}).get("thinking", True) is not False
    findings = compare(chat.data, raw.data, thinking=thinking, exact_prompt=exact)
    choices = chat.data.get("choices") or [{}]
    detail = reasoning_fields(as_object(as_object(choices[0]).get("message"))) if not probe.tools else ""
    if not exact:
        detail = (
            detail + "; " if detail else ""
        ) + "the server returned no prompt ids: /generate got the prompt rendered by kimi-serve (tools as JSON)"
    return ProbeResult(probe.name, MODE, latency, tuple(findings), detail=detail)


def _failed(probe: Probe, posted: Posted, latency: float | None = None) -> ProbeResult:
    failure = posted.failure or problem(
        "lossless_malformed", "the answer is not a JSON object", "point --host at SGLang itself"
    )
    return ProbeResult(
        probe.name, MODE, posted.latency_s if latency is None else latency, (failure,), unreachable=posted.unreachable
    )
