"""What a turn's tool calls say: finish_reason tool_calls, each call's id, type, name and arguments (JSON, an object,
valid against the offered tool's schema), distinct ids and indices, as many calls as the probe asks for. The text
around them is :mod:`kimi_serve.verify.diagnose`'s."""

from __future__ import annotations

from typing import Any

from kimi_serve.core.findings import Finding
from kimi_serve.verify import wire
from kimi_serve.verify.answer import Answer, ToolCall
from kimi_serve.verify.diagnose import FIX_TOOL_PARSER, TOOL_TOKEN
from kimi_serve.verify.http_findings import past_bound
from kimi_serve.verify.report import clip, problem

# tool-call arguments one answer's calls may hold together for verify to decode and validate (the 8 KB argument probe
# sends ~9 KB): past it the rest is not decoded, so 16 MiB of arguments cannot hold the verdict past --timeout
MAX_ARGUMENT_CHARS = 1024 * 1024


def _validate(arguments: Any, schema: dict[str, Any]) -> str | None:
    import jsonschema

    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(arguments))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where + ': ' if where else ''}{error.message}"


def call_findings(call: ToolCall, position: int, schemas: dict[str, dict[str, Any]]) -> list[Finding]:
    label = f"tool call #{position}"
    named = f"{label} ({call.name or 'no name'})"
    found: list[Finding] = []
    if not call.id:
        fix = FIX_TOOL_PARSER + "; clients need the id to send the result back"
        found.append(problem("tool_call_id", f"{label} has no id", fix))
    if call.type != "function":
        found.append(
            problem("tool_call_type", f'{label} has type {wire.shown(call.type)}, expected "function"', FIX_TOOL_PARSER)
        )
    if call.name not in schemas:
        offered = f"not one of the offered tools ({', '.join(schemas)})"
        what = f"{label} names function {wire.shown(call.name)}, {offered}"
        return [*found, problem("unknown_function", what, FIX_TOOL_PARSER + "; a wrong parser mangles names")]
    if call.arguments is None and call.arguments_kind not in ("string", "null"):
        return [
            *found,
            problem(
                "arguments_not_string",
                f"{named} arguments is a JSON {call.arguments_kind}, not a string holding JSON: clients json.loads() "
                "it (the openai SDK types it str) and fail",
                "SGLang sends arguments as a JSON string; a proxy or another server in between decodes it: point "
                "--host at SGLang itself or configure the proxy to pass tool_calls through unchanged",
            ),
        ]
    if call.arguments is None:
        return [*found, problem("arguments_missing", f"{named} has no arguments", FIX_TOOL_PARSER)]
    try:
        arguments = wire.loads(call.arguments)
    except wire.WireLimit as exc:
        return [*found, past_bound(exc.limit, f"{named} arguments")]
    except ValueError:
        return [
            *found,
            problem(
                "arguments_not_json",
                f"{named} arguments are not JSON: {clip(call.arguments)!r}",
                "check the SGLang tool parser (--tool-call-parser kimi_k2) and any speculative "
                "decoding settings that can cut argument fragments",
            ),
        ]
    if not isinstance(arguments, dict):
        what = f"{named} arguments are not a JSON object: {clip(call.arguments)!r}"
        return [*found, problem("arguments_not_object", what, FIX_TOOL_PARSER)]
    invalid = _validate(arguments, schemas[call.name])
    if invalid:
        found.append(
            problem(
                "arguments_schema",
                f"{named} arguments fail the tool schema: {invalid}; arguments {clip(call.arguments)!r}",
                "the model ignored the tool schema: serve Kimi-K2.5's own chat template (the tool "
                "declaration must reach the model)",
            )
        )
    return found


def tool_turn_findings(answer: Answer, schemas: dict[str, dict[str, Any]], *, min_calls: int) -> list[Finding]:
    """finish_reason == tool_calls, at least ``min_calls`` well-formed calls with distinct ids and indices."""
    found: list[Finding] = []
    has_tokens = bool(TOOL_TOKEN.search((answer.content or "") + (answer.reasoning or "")))
    if not answer.tool_calls:
        if answer.finish_reason == "tool_calls":
            found.append(
                problem(
                    "tool_calls_missing",
                    "finish_reason is tool_calls but message.tool_calls is empty "
                    "(the parser saw a tool section and could not parse it)",
                    FIX_TOOL_PARSER,
                )
            )
        elif answer.finish_reason == "length":
            found.append(
                problem(
                    "length",
                    "ran out of max_tokens before the tool call finished",
                    "raise the server's context length or check for degenerate output in the log",
                )
            )
        elif not has_tokens:  # raw tool tokens are named by text_findings
            found.append(
                problem(
                    "no_tool_call",
                    f"no tool call (finish_reason {wire.shown(answer.finish_reason)}); "
                    f"content: {clip(answer.content or '')!r}",
                    "with the tools offered Kimi-K2.5 calls one; an empty reply means the parser dropped "
                    "the call: " + FIX_TOOL_PARSER,
                )
            )
        return found
    if answer.finish_reason != "tool_calls":
        found.append(
            problem(
                "finish_reason",
                f"finish_reason is {wire.shown(answer.finish_reason)} though tool_calls are "
                "present (clients stop instead of running the tool)",
                "SGLang sets tool_calls when its parser produced calls; check --tool-call-parser "
                "kimi_k2 and stream/speculative settings",
            )
        )
    decoded = 0
    for position, call in enumerate(answer.tool_calls):
        decoded += len(call.arguments or "")
        if decoded > MAX_ARGUMENT_CHARS:
            bound = f"{MAX_ARGUMENT_CHARS} characters of tool-call arguments per answer"
            found.append(past_bound(bound, f"tool call {position} ({call.name or 'no name'}) arguments"))
            break
        found.extend(call_findings(call, position, schemas))
    if len(answer.tool_calls) < min_calls:
        found.append(
            problem(
                "parallel_calls",
                f"{len(answer.tool_calls)} tool call(s), expected {min_calls} in one turn",
                "if the server log shows more calls in the raw output the parser dropped them: " + FIX_TOOL_PARSER,
            )
        )
    ids = [c.id for c in answer.tool_calls if c.id]
    if len(set(ids)) != len(ids):
        found.append(problem("duplicate_ids", f"tool call ids repeat: {ids}", FIX_TOOL_PARSER))
    indices = [c.index for c in answer.tool_calls if c.index is not None]
    if len(set(indices)) != len(indices):
        found.append(problem("duplicate_indices", f"tool call indices repeat: {indices}", FIX_TOOL_PARSER))
    return found
