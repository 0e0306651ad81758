"""Turn what a server answered (its text and reasoning) into findings: what is wrong and what fixes it. Its tool
calls are :mod:`kimi_serve.verify.tool_findings`, the cause several probes share :mod:`kimi_serve.verify.causes`, what
the HTTP exchange itself says (refused, 401, 5xx, not JSON) :mod:`kimi_serve.verify.http_findings`.

The fixes name SGLang flags and, in parentheses, the kimi-serve profile key that sets them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kimi_serve.core.findings import Finding
from kimi_serve.core.pin import SGLANG_VERSION
from kimi_serve.verify import wire
from kimi_serve.verify.answer import Answer
from kimi_serve.verify.report import clip, problem
from kimi_serve.verify.thinking import ANY_MARKER, FAMILIES, echoed_reasoning, marker

TOOL_TOKEN = re.compile(r"<\|tool_call[a-z_]*\|>")
SPECIAL_TOKEN = re.compile(r"<\|[A-Za-z0-9_]+\|>|\[(?:EOS|BOS|EOT)\]")
THINK_TAG = ANY_MARKER  # every Kimi family's think markers (verify/thinking.py)
BARE_CALL = re.compile(r"functions\.[\w.\-]+:\d+")

FIX_TOOL_PARSER = "start SGLang with --tool-call-parser kimi_k2 (profile: parsers.tool_call: kimi_k2)"
FIX_REASONING_PARSER = "start SGLang with --reasoning-parser kimi_k2 (profile: parsers.reasoning: kimi_k2)"
Check = Callable[[Answer, dict[str, Any]], list[Finding]]  # an answer and /model_info's parsers -> its findings


def answer_check(rule: Check) -> Check:
    """A probe's check: :func:`text_findings` and :func:`other_field_findings`, then ``rule``."""
    return lambda answer, server: text_findings(answer, server) + other_field_findings(answer) + rule(answer, server)


def parser_note(server: dict[str, Any], key: str) -> str:
    """What /model_info said about the parser, when it said anything."""
    if key not in server:
        return ""
    return f"; the server reports {key}={wire.shown(server[key])}" if server[key] else f"; the server reports no {key}"


# --- text fields --------------------------------------------------------------------------------------------------


def text_findings(answer: Answer, server: dict[str, Any]) -> list[Finding]:
    """No Kimi special token and no think marker (any Kimi family) in content or reasoning, no reasoning repeated in
    content; raw tool markup has its own cause."""
    found: list[Finding] = []
    content, reasoning = answer.content or "", answer.reasoning or ""
    if TOOL_TOKEN.search(content):
        found.append(
            problem(
                "raw_tool_tokens",
                f"raw Kimi tool-call tokens in content (finish_reason {wire.shown(answer.finish_reason)}, "
                f"{len(answer.tool_calls)} tool_calls), so the tool-call parser is not active"
                f"{parser_note(server, 'tool_call_parser')}: {clip(content[content.find('<|tool_call') :])!r}",
                FIX_TOOL_PARSER,
            )
        )
    elif BARE_CALL.search(content) and not answer.tool_calls:
        found.append(
            problem(
                "raw_tool_text",
                f"tool-call text without markers in content (markers stripped, parser not active): {clip(content)!r}",
                FIX_TOOL_PARSER,
            )
        )
    if TOOL_TOKEN.search(reasoning):
        fix = (
            "use --reasoning-parser kimi_k2, which ends reasoning at <|tool_calls_section_begin|> "
            "(profile: parsers.reasoning: kimi_k2)"
        )
        if server.get("reasoning_parser") == "kimi_k2":
            fix = (
                "this SGLang's kimi_k2 reasoning parser does not end reasoning at <|tool_calls_section_begin|>: "
                f"run SGLang {SGLANG_VERSION} (the version kimi-serve pins), whose parser does"
            )
        found.append(
            problem(
                "tool_call_in_reasoning",
                "tool-call tokens inside reasoning_content: the call was swallowed by reasoning"
                f"{parser_note(server, 'reasoning_parser')}",
                fix,
            )
        )
    found += _think_findings(content, reasoning, server)
    for field_name, text in (("content", content), ("reasoning_content", reasoning)):
        specials = {m.group(0) for m in SPECIAL_TOKEN.finditer(THINK_TAG.sub(" ", text))}  # markers: named above
        leaked = sorted(specials - {m.group(0) for m in TOOL_TOKEN.finditer(text)})
        if leaked:
            found.append(
                problem(
                    "special_token_leak",
                    f"Kimi special token(s) {', '.join(leaked)} in {field_name}",
                    "serve the checkpoint's own tokenizer and chat template (--trust-remote-code, no --chat-template "
                    "override) and do not send skip_special_tokens=false",
                )
            )
    return found


_FIX_OTHER_FAMILY = (
    "serve Kimi-K2.5 with --reasoning-parser kimi_k2 and its own chat template (profile: parsers.reasoning: "
    "kimi_k2); if SGLang itself returns clean fields (verify --host pointed at it), a gateway in between rewrites "
    "reasoning into content: make it pass reasoning_content through unchanged"
)


def _think_findings(content: str, reasoning: str, server: dict[str, Any]) -> list[Finding]:
    """Think markers of any Kimi family in content or reasoning_content; content that repeats the reasoning."""
    found: list[Finding] = []
    if hit := marker(content):
        tag, family = hit
        if family is FAMILIES[0]:  # Kimi-K2.5's own markers: its parser is not active
            note = parser_note(server, "reasoning_parser")
            text = f"`{tag}` in content, so the reasoning parser is not active{note}"
            fix = FIX_REASONING_PARSER
        else:
            text = (
                f"reasoning wrapped in {family.name} think markers (`{tag}`) in content: not Kimi-K2.5's own "
                "`<think>` format, so SGLang's kimi_k2 parser cannot split it; another Kimi model's template or "
                "parser serves it, or a gateway folds reasoning into content"
            )
            fix = _FIX_OTHER_FAMILY
        found.append(problem("think_in_content", f"{text}: {clip(content)!r}", fix))
    if hit := marker(reasoning):
        found.append(
            problem(
                "think_in_reasoning",
                f"think marker `{hit[0]}` ({hit[1].name}) inside reasoning_content",
                FIX_REASONING_PARSER + "; another reasoning parser leaves Kimi's tags in",
            )
        )
    if reasoning.strip() and echoed_reasoning(content, reasoning):
        found.append(
            problem(
                "reasoning_in_content",
                "content repeats the reasoning before the answer (reasoning_content is also sent): a client shows "
                "the reasoning to the user as the answer, and sends it back as history"
                f"{parser_note(server, 'reasoning_parser')}: {clip(content)!r}",
                "SGLang's kimi_k2 reasoning parser sends each once, so the likely culprit is a gateway in between "
                "that merges reasoning_content into content (a 'show reasoning' / merge option): turn that off, or "
                "point --host at SGLang itself to confirm; if SGLang itself does it, serve --reasoning-parser "
                "kimi_k2 (profile: parsers.reasoning: kimi_k2)",
            )
        )
    return found


def other_field_findings(answer: Answer) -> list[Finding]:
    """Reasoning only in another stack's field (``reasoning``, ...): this deployment's clients read reasoning_content.
    Sent in both (vLLM-style servers and some proxies do), clients read reasoning_content fine: no finding."""
    if (answer.reasoning or "").strip():
        return []
    return [
        problem(
            "reasoning_field",
            f"reasoning came back in message.{name}, not message.reasoning_content",
            f"clients of this deployment read reasoning_content; SGLang writes it there, so a proxy or "
            f"another server renamed it to `{name}`: point --host at SGLang itself or configure the proxy",
        )
        for name in answer.other_reasoning
    ]


# --- reasoning and answers ----------------------------------------------------------------------------------------


def reasoning_findings(answer: Answer, server: dict[str, Any]) -> list[Finding]:
    """Thinking on: non-empty reasoning_content and non-empty content."""
    content, reasoning = (answer.content or "").strip(), (answer.reasoning or "").strip()
    if THINK_TAG.search(content) or (answer.other_reasoning and not reasoning):
        return []  # already named by text_findings / other_field_findings
    if answer.finish_reason == "length" and not content:
        return [
            problem(
                "length",
                "ran out of max_tokens while thinking (no final content)",
                "check the server log for degenerate output; the probe allows generous max_tokens",
            )
        ]
    if not reasoning and content:
        if server.get("reasoning_parser") == "kimi_k2":
            why = (
                "reasoning_content is empty and content holds the whole reply though thinking is on and the "
                "server reports reasoning_parser='kimi_k2': reasoning is being stripped"
            )
            fix = (
                "keep `</think>` in the decoded text (it is a special token: skip_special_tokens must not drop it) "
                "and serve the model's own chat template (it prefills <think>)"
            )
        else:
            why = (
                f"reasoning_content is empty and content holds the whole reply though thinking is on"
                f"{parser_note(server, 'reasoning_parser')}: {clip(content)!r}"
            )
            fix = (
                FIX_REASONING_PARSER + "; if it is set, `</think>` is stripped from the output "
                "(skip_special_tokens), so the parser cannot split"
            )
        return [problem("reasoning_missing", why, fix)]
    if reasoning and not content:
        return [
            problem(
                "content_missing",
                "content is empty and the whole reply is in reasoning_content: the end of "
                "thinking was never seen (`</think>` stripped by skip_special_tokens, or the wrong parser)",
                "keep `</think>` in decoded text and use --reasoning-parser kimi_k2 "
                "(profile: parsers.reasoning: kimi_k2)",
            )
        ]
    if not reasoning and not content:
        return [
            problem(
                "empty_reply",
                f"empty reply (finish_reason {wire.shown(answer.finish_reason)})",
                "read the SGLang log for this request",
            )
        ]
    return []


def final_answer_findings(answer: Answer, *, after: str) -> list[Finding]:
    """A plain final answer: content present, finish_reason stop, no tool call."""
    found: list[Finding] = []
    if answer.tool_calls:
        found.append(
            problem(
                "unexpected_tool_call",
                f"a tool call {after} where a final answer was expected",
                "check the server log; the tool result may not have reached the model",
            )
        )
    elif not (answer.content or "").strip():
        found.append(
            problem(
                "content_missing",
                f"empty content {after} (finish_reason {wire.shown(answer.finish_reason)})",
                FIX_TOOL_PARSER + "; history tool-call ids must be functions.NAME:IDX",
            )
        )
    if answer.finish_reason not in ("stop", None) and not found:
        found.append(
            problem(
                "finish_reason",
                f'finish_reason {wire.shown(answer.finish_reason)} {after}, expected "stop"',
                "check the server log for this request",
            )
        )
    return found


def instant_findings(answer: Answer) -> list[Finding]:
    """thinking=false: content, and no reasoning."""
    reasoning = (answer.reasoning or "").strip()
    if reasoning:
        where = "and content is empty" if not (answer.content or "").strip() else "next to the content"
        return [
            problem(
                "instant_reasoning",
                f"thinking=false was ignored: reasoning_content came back {where}: {clip(reasoning)!r}",
                "serve Kimi-K2.5's own chat template (it switches on chat_template_kwargs.thinking, not "
                "enable_thinking); do not override --chat-template",
            )
        ]
    return final_answer_findings(answer, after="in instant mode")
