"""The one cause several failed probes share, said once for verify's last line: a parser flag the server runs
without (its answers show raw Kimi markup), or a fault every request meets (a refused key, a dead server)."""

from __future__ import annotations

from typing import Any

from kimi_serve.core.findings import Finding

TOOL_PARSER_FLAG = "--tool-call-parser kimi_k2"
REASONING_PARSER_FLAG = "--reasoning-parser kimi_k2"
# One table: a finding code -> what it says about the whole server. A parser flag: the code shows raw Kimi markup (or
# what its absence does), so every probe failing with it fails for that one missing flag; "" : the finding's own
# message is a cause every request meets (a refused key, a dead server), not something one answer got wrong.
CAUSES: dict[str, str] = {
    "raw_tool_tokens": TOOL_PARSER_FLAG,
    "raw_tool_text": TOOL_PARSER_FLAG,
    "tool_calls_missing": TOOL_PARSER_FLAG,
    "think_in_content": REASONING_PARSER_FLAG,
    "think_in_reasoning": REASONING_PARSER_FLAG,
    "reasoning_missing": REASONING_PARSER_FLAG,
    "strict_call_dropped": REASONING_PARSER_FLAG,
    "http_401": "",
    "http_404_model": "",
    "unreachable": "",
    "connection_reset": "",
    "content_encoding": "",
    "non_json_body": "",
    "stream_not_sse": "",
}
_PARSER_KEY = {TOOL_PARSER_FLAG: "tool_call_parser", REASONING_PARSER_FLAG: "reasoning_parser"}


def missing_parsers(failures: list[tuple[Finding, ...]], server: dict[str, Any]) -> list[str]:
    """The parser flags the server runs without, as its answers show them (``failures``: each failed probe's
    findings), in :data:`CAUSES` order; a parser the server reports as set (``/model_info``) is not missing."""
    seen = {CAUSES.get(f.code) for found in failures for f in found}
    return [
        flag
        for flag in (TOOL_PARSER_FLAG, REASONING_PARSER_FLAG)
        if flag in seen and server.get(_PARSER_KEY[flag]) != "kimi_k2"
    ]


def shared_cause(failures: list[tuple[Finding, ...]], server: dict[str, Any]) -> str | None:
    """The one cause several failed probes share, said for verify's last line: the missing parsers ("started without
    `--tool-call-parser kimi_k2 --reasoning-parser kimi_k2`: 7 probes failed"), else a server-wide fault of
    :data:`CAUSES` (a refused key, a dead server); None when no cause covers two probes."""
    flags = missing_parsers(failures, server)
    if flags:
        hit = sum(1 for found in failures if any(CAUSES.get(f.code) in flags for f in found))
        if hit >= 2:
            return f"started without `{' '.join(flags)}`: {hit} probes failed"
    for code, flag in CAUSES.items():
        if flag:
            continue
        hits = [f for found in failures for f in found[:1] if f.code == code]  # the reason each probe failed
        if len(hits) >= 2:
            return f"{hits[0].message}: {len(hits)} probes failed"
    return None
