"""The agentic probes' rules (verify/agentic.py), on one answer: what real agent clients send and what breaks them.
Pure functions of an :class:`Answer`, so the fast tier tests them on recorded responses.

Every finding names the clients it breaks (what they send: docs/verify.md "Agentic probes") and the fix.
"""

from __future__ import annotations

import json
from typing import Any

from kimi_serve.core.findings import Finding
from kimi_serve.core.pin import KIMI_PATCH_SET, patch_set_args, patches_apply
from kimi_serve.verify import diagnose as dx
from kimi_serve.verify import wire
from kimi_serve.verify.answer import Answer, ToolCall
from kimi_serve.verify.report import clip, problem, warning
from kimi_serve.verify.thinking import marker
from kimi_serve.verify.tool_findings import tool_turn_findings

# who sends what (measured against SGLang 0.5.23 with prod's flags and with parsers left out)
STRICT_CLIENTS = "openai-agents and pydantic-ai (they declare function tools `strict: true` by default)"
LOOP_CLIENTS = "every agent loop (opencode, the AI SDK, openai-agents, pydantic-ai, LangChain, kimi-cli)"
PUBLISHED_CONTEXT = 262_144  # Kimi-K2.5's published context length, what clients are configured with
# thinking off, three dialects: (name, request fields, the clients that send it)
DIALECTS: tuple[tuple[str, dict[str, Any], str], ...] = (
    (
        "chat_template_kwargs",
        {"chat_template_kwargs": {"thinking": False}},
        "SGLang's and vLLM's Kimi recipes, Moonshot's vendor verifier, the openai SDK with extra_body",
    ),
    (
        "reasoning_effort",
        {"reasoning_effort": "none"},
        "clients that set OpenAI's reasoning_effort (openai-agents, pydantic-ai and LangChain expose it; kimi-cli "
        "sends it)",
    ),
    (
        "thinking",
        {"thinking": {"type": "disabled"}},
        "kimi-cli's `kimi` provider and clients written for Moonshot's API (api.moonshot.ai's dialect)",
    ),
)


def strict_findings(
    answer: Answer, schemas: dict[str, dict[str, Any]], server: dict[str, Any], *, min_calls: int
) -> list[Finding]:
    """The tool rules for ``strict: true`` tools; a call that never came (finish_reason stop) is named for what it
    is: SGLang's strict-tool grammar applied from the first token (no reasoning parser) drops it."""
    found = tool_turn_findings(answer, schemas, min_calls=min_calls)
    if not any(f.code == "no_tool_call" for f in found):
        return found
    dropped = problem(
        "strict_call_dropped",
        f"with `strict: true` tools no tool call came back (finish_reason {wire.shown(answer.finish_reason)}; content: "
        f"{clip(answer.content or '')!r}): {STRICT_CLIENTS} get no tool call at all. SGLang constrains a strict "
        "tool's arguments with a grammar; without the kimi_k2 reasoning parser the grammar applies from the first "
        f"token and the call never starts{dx.parser_note(server, 'reasoning_parser')}",
        dx.FIX_REASONING_PARSER + "; if it is set, read the SGLang log for grammar errors (--grammar-backend)",
    )
    return [dropped if f.code == "no_tool_call" else f for f in found]


def _same_call(call: ToolCall, earlier: tuple[ToolCall, ...]) -> bool:
    def args(c: ToolCall) -> Any:
        try:
            return wire.loads(c.arguments or "")
        except ValueError:
            return c.arguments

    return any(c.name == call.name and args(c) == args(call) for c in earlier)


def follow_up_findings(answer: Answer, turn1: tuple[ToolCall, ...], replay: str) -> list[Finding]:
    """The answer after the tool results went back (``replay``: how the history was sent, and by whom): it must
    answer in content, not call the same tool again, not end empty right after `</think>`."""
    content, reasoning = (answer.content or "").strip(), (answer.reasoning or "").strip()
    call = answer.tool_calls[0] if answer.tool_calls else None
    if call is not None and _same_call(call, turn1):
        ids = ", ".join(c.id or "?" for c in turn1)
        return [
            problem(
                "tool_loop",
                f"after the tool result went back under the server's own id ({ids}; {replay}) the model called "
                f"{call.name or 'a nameless tool'} again with the same arguments: {LOOP_CLIENTS} run the tool "
                "again until their step limit",
                "the tool result did not reach the model as the answer to its call: serve Kimi-K2.5's own chat "
                "template (it renders a result as `## Return of functions.NAME:IDX`) and --tool-call-parser "
                "kimi_k2 (its ids are functions.NAME:IDX); read the prompt in the SGLang log",
            )
        ]
    if call is None and not content and reasoning:
        return [
            problem(
                "empty_after_think",
                f"the follow-up ended right after its reasoning with empty content (finish_reason "
                f"{wire.shown(answer.finish_reason)}; {replay}): the agent shows an empty answer and stops; "
                "the failure of MoonshotAI/Kimi-K2#128 (multi-turn tool follow-ups, reproduced on SGLang with EAGLE-3 "
                "and on vLLM)",
                "serve the checkpoint's own chat template (history reasoning and tool results rendered as Kimi "
                "expects); rerun with speculative decoding off to tell a draft-model fault from the model's, and "
                "update the checkpoint and template when Moonshot fixes it",
            )
        ]
    return dx.final_answer_findings(answer, after=f"after the tool result ({replay})")


def dialect_findings(answer: Answer, dialect: str, clients: str) -> list[Finding]:
    """Thinking off in one dialect: honoured (no reasoning, an answer in content), or a warning naming who sends it.
    Markup in content is text_findings' (a fail on any probe)."""
    reasoning, content = (answer.reasoning or "").strip(), answer.content or ""
    if reasoning or marker(content) or answer.other_reasoning:
        field = next(iter(answer.other_reasoning), "reasoning_content") if not reasoning else "reasoning_content"
        where = f"in {field}" if reasoning or answer.other_reasoning else "in content (before `</think>`)"
        sent = json.dumps(_fields(dialect))
        return [
            warning(
                f"thinking_ignored.{dialect}",
                f"thinking off as {sent} was ignored: the model reasoned anyway ({where}); {clients} pay for "
                "reasoning they turned off (latency, tokens)",
                'have those clients send chat_template_kwargs: {"thinking": false} or reasoning_effort: "none" '
                "(SGLang honours both); for Moonshot's thinking field, apply the Kimi patch set "
                f"(`{patches_apply(patch_set_args(KIMI_PATCH_SET))}`: its moonshot_thinking_field maps it onto "
                "the template's switch), or map it in front of SGLang",
            )
        ]
    return dx.final_answer_findings(answer, after=f"with thinking off ({dialect})")


def _fields(dialect: str) -> dict[str, Any]:
    return next(fields for name, fields, _ in DIALECTS if name == dialect)


IGNORED_CODES = frozenset({"instant_reasoning"} | {f"thinking_ignored.{name}" for name, _, _ in DIALECTS})


def honoured(findings: tuple[Finding, ...]) -> str:
    """What the report says of one dialect from its probe's failures and warnings: ``ignored`` (it reasoned anyway),
    ``honoured``, or ``unknown`` (the probe failed for another reason)."""
    if any(f.code in IGNORED_CODES for f in findings):
        return "ignored"
    return "unknown" if any(f.status == "fail" for f in findings) else "honoured"
