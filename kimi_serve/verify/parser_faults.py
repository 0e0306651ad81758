"""Does the server's own kimi_k2 tool-call parser lose calls? Each of :data:`CASES` (docs/verify.md, "The server's
parser") goes to SGLang's ``POST /parse_function_call``, which runs the server's installed detector (the
non-streaming path) on a text verify gives it, so the faults show without asking the model to produce them. The Kimi
patch set fixes both (features ``keep_unexpected_tool_call_ids``, ``bare_tool_call_begin_non_stream``).

A fault is a warning naming that fix; a server without the endpoint (a gateway, the router) or that refuses it is not
judged (skip). Each request is a parse, no generation: cheap enough for ``quick`` (the start gate, the monitor).
"""

from __future__ import annotations

import json
from typing import Any

from kimi_serve.core.findings import PASS, SKIP, WARN, Finding
from kimi_serve.core.http import TransportError, request
from kimi_serve.core.pin import KIMI_PATCH_SET, patch_set_args, patches_apply
from kimi_serve.verify import wire
from kimi_serve.verify.report import verdict
from kimi_serve.verify.target import Target

PATH = "/parse_function_call"
# the unexpected-id case's id: outside both of SGLang's patterns, and a marker no client sends, so the lines SGLang
# logs for verify's own probe are not counted as real traffic (service/traffic.py's one exclusion)
PROBE_ID = "call_kimiserve_probe_8f2a"
TOOL = "get_weather"
ARGS = {"city": "Paris"}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": TOOL,
            "description": "Current weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def _call(call_id: str) -> str:
    return f"<|tool_call_begin|>{call_id}<|tool_call_argument_begin|>{json.dumps(ARGS)}<|tool_call_end|>"


FIX = f"apply the Kimi patch set to the server's SGLang ({patches_apply(patch_set_args(KIMI_PATCH_SET))}) and restart"
# (code, the text the server's parser gets, what the fault does to an agent)
CASES = (
    (
        "parser.unexpected_id",
        "<|tool_calls_section_begin|>" + _call(PROBE_ID) + "<|tool_calls_section_end|>",
        f"drops a tool call whose id is outside its two id patterns ({PROBE_ID}): the agent gets no tool_calls and "
        "finish_reason stop (sgl-project/sglang#25358)",
    ),
    (
        "parser.bare_call_begin",
        _call(f"functions.{TOOL}:0"),
        "returns a call without <|tool_calls_section_begin|> as raw text when not streaming, while streaming parses "
        "it: the two modes disagree on one output",
    ),
)


def judge(code: str, what: str, status: int, body: Any) -> Finding:
    """The finding for one case from the endpoint's answer (``body``: its parsed JSON, or None)."""
    if status in (401, 403, 404, 405) or not isinstance(body, dict) or not isinstance(body.get("calls"), list):
        shown = f"HTTP {status}" if status != 200 else "an answer without calls[]"
        return verdict(code, SKIP, f"POST {PATH}: {shown}; the server's kimi_k2 parser not checked")
    calls = [c for c in body["calls"] if isinstance(c, dict)]
    try:
        kept = len(calls) == 1 and calls[0].get("name") == TOOL and wire.loads(str(calls[0].get("parameters"))) == ARGS
    except (TypeError, ValueError):
        kept = False
    if kept:
        return verdict(code, PASS, f"the server's kimi_k2 parser keeps the call ({code.split('.')[1]})")
    return verdict(
        code,
        WARN,
        f"the server's kimi_k2 parser {what} (POST {PATH} gave {len(calls)} call(s))",
        FIX,
    )


def request_body(text: str) -> dict[str, Any]:
    """What verify POSTs for one case: the text, the one offered tool, the kimi_k2 parser."""
    return {"text": text, "tools": TOOLS, "tool_call_parser": "kimi_k2"}


def parser_checks(target: Target, api_key: str | None, deadline: float) -> list[Finding]:
    """One finding per fault in :data:`CASES`: pass (fixed), warn (the fault, with the fix), skip (not judged)."""
    out = []
    for code, text, what in CASES:
        try:
            reply = request("POST", target.url(PATH), deadline=deadline, api_key=api_key, json_body=request_body(text))
        except TransportError as err:
            out.append(verdict(code, SKIP, f"POST {PATH}: {err.detail}; not checked"))
            continue
        try:
            parsed = wire.loads(reply.body) if not (reply.timed_out or reply.cut or reply.limit) else None
        except ValueError:
            parsed = None
        out.append(judge(code, what, reply.status, parsed))
    return out


def unused(findings: list[Finding], reported: str | None) -> list[Finding]:
    """The findings of :func:`parser_checks` for a server that does not run the kimi_k2 tool-call parser (``reported``:
    the parser it runs, None for none): its answers never reach that parser, so its faults are not this server's and
    the patch set's advice cannot apply: each warning becomes a skip that says why."""
    runs = f"runs --tool-call-parser {reported}" if reported else "runs without --tool-call-parser"
    return [
        verdict(f.code, SKIP, f"not judged: the server {runs}, so its answers never reach the kimi_k2 parser")
        if f.status == WARN
        else f
        for f in findings
    ]
