"""The raw-token path (`verify --suite raw`, part of `full`): SGLang's native ``/generate`` with Kimi's chat template
rendered here, ``skip_special_tokens: false``, nothing parsed. The answer must carry ``output_ids`` with ``</think>``
as the one id 163607, text in Kimi's raw format, and ``meta_info`` with the matched stop id and token counts.

This path needs no parser on the server; :mod:`kimi_serve.verify.lossless` compares it with the parsed one.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kimi_serve.core.findings import Finding
from kimi_serve.verify import kimi_format as kf
from kimi_serve.verify import wire
from kimi_serve.verify.answer import json_kind
from kimi_serve.verify.discovery import post
from kimi_serve.verify.probes import MAX_TOKENS, REASONING, TOOL, WEATHER_TOOLS, Probe
from kimi_serve.verify.report import ProbeResult, clip, problem

GENERATE = "generate"  # the ProbeResult mode of a /generate probe
MAX_NEW_TOKENS = MAX_TOKENS
SEED = 1234
_CALL_ID = re.compile(r"^functions\.(?P<name>[\w.\-]+):(?P<index>\d+)$")
FIX_STRIPPED = (
    "send skip_special_tokens: false to SGLang's /generate itself (a proxy or engine in between drops "
    "it), or decode output_ids with Kimi's tokenizer (skip_special_tokens=False) to get the raw text"
)


def generate_body(probe: Probe, *, input_ids: list[int] | None = None) -> dict[str, Any]:
    """The /generate request for ``probe``: the rendered prompt (or exact ``input_ids``), greedy, specials kept."""
    thinking = (probe.template_kwargs or {}).get("thinking", True) is not False
    prompt: dict[str, Any] = (
        {"input_ids": input_ids}
        if input_ids is not None
        else {"text": kf.render_prompt(probe.messages, list(probe.tools), thinking=thinking)}
    )
    return {
        **prompt,
        "stream": False,
        "sampling_params": {
            "temperature": 0.0,
            "max_new_tokens": MAX_NEW_TOKENS,
            "skip_special_tokens": False,
            "sampling_seed": SEED,
        },
    }


def _meta_findings(data: dict[str, Any], stop_ids: tuple[int, ...] = kf.STOP_IDS) -> list[Finding]:
    meta = data.get("meta_info")
    if not isinstance(meta, dict):
        return [
            problem(
                "raw_no_meta_info",
                "the /generate answer has no meta_info object",
                "point --host at SGLang's native server; a proxy that reshapes /generate loses meta_info",
            )
        ]
    found: list[Finding] = []
    finish = meta.get("finish_reason")
    if not isinstance(finish, dict) or finish.get("type") not in ("stop", "length", "abort"):
        found.append(
            problem(
                "raw_finish_reason",
                f"meta_info.finish_reason is {clip(json.dumps(finish))}, not {{type, matched}}",
                "point --host at SGLang 0.5.23's /generate",
            )
        )
    elif finish["type"] == "length":
        found.append(
            problem(
                "length",
                f"generation stopped at max_new_tokens {MAX_NEW_TOKENS} before a stop token",
                "the model did not finish; rerun, or read the SGLang log",
            )
        )
    elif finish["type"] == "stop" and finish.get("matched") not in stop_ids:
        found.append(
            problem(
                "raw_matched_stop",
                f"finish_reason.matched is {wire.shown(finish.get('matched'), 'no matched stop')}, not the model's "
                f"stop id ({' or '.join(map(kf.id_name, stop_ids))})",
                "serve the checkpoint's own config.json and generation_config.json (its eos ids; docs/families.md)",
            )
        )
    elif finish["type"] == "abort":
        found.append(
            problem("raw_abort", f"the request was aborted: {clip(json.dumps(finish))}", "read the SGLang log")
        )
    for key in ("prompt_tokens", "completion_tokens"):
        if not isinstance(meta.get(key), int) or meta[key] <= 0:
            found.append(
                problem(
                    "raw_token_counts",
                    f"meta_info.{key} is {wire.shown(meta.get(key), 'missing')}, not a positive count",
                    "point --host at SGLang 0.5.23's /generate",
                )
            )
    return found


def _think_findings(text: str, ids: list[int], thinking: bool) -> list[Finding]:
    in_ids, in_text = ids.count(kf.THINK_END_ID), text.count(kf.THINK_END)
    if not in_ids and not in_text and kf.SECTION_BEGIN in text:
        return []  # Kimi sometimes opens the tool-call section with no </think>; the section ends the reasoning
    if not thinking and in_ids:
        return [
            problem(
                "raw_think_in_instant",
                "</think> (163607) was generated although thinking is off",
                "render the prompt with <think></think>",
            )
        ]
    if not thinking or (in_ids == 1 and in_text == 1):
        return []
    if in_ids and not in_text:
        return [
            problem(
                "raw_special_stripped",
                "</think> is in output_ids as 163607 but not in the text: the "
                "server decoded with special tokens skipped although skip_special_tokens was false",
                FIX_STRIPPED,
            )
        ]
    if in_text and not in_ids:
        return [
            problem(
                "raw_think_not_one_id",
                "the text holds </think> but output_ids lack 163607: the tokenizer splits </think> into pieces",
                "serve Kimi-K2.5's own tokenizer "
                "(--trust-remote-code, tiktoken.model), where </think> is the single id 163607",
            )
        ]
    if in_ids > 1 or in_text > 1:
        return [
            problem(
                "raw_think_repeated",
                f"</think> appears {max(in_ids, in_text)} times in one answer",
                "read the raw text: the model re-opened reasoning; rerun",
            )
        ]
    return [
        problem(
            "raw_no_think_end",
            "no </think> (163607) in the answer: the reasoning never closed",
            "the prompt must end with <think> (thinking on); read the raw text",
        )
    ]


def _call_findings(turn: kf.RawTurn, names: set[str]) -> list[Finding]:
    found = []
    for i, call in enumerate(turn.calls):
        m = _CALL_ID.match(call.id.strip())
        if not m or m.group("name") not in names:
            found.append(
                problem(
                    "raw_call_id",
                    f"tool call {i} id {wire.shown(call.id)} is not functions.NAME:N for an "
                    f"offered tool ({', '.join(sorted(names))})",
                    "read the raw text",
                )
            )
        try:
            args = wire.loads(call.arguments)
            bad = "" if isinstance(args, dict) else f"are a JSON {json_kind(args)}, not an object"
        except ValueError:
            bad = f"are not JSON: {clip(call.arguments)!r}"
        if bad:
            found.append(problem("raw_arguments_json", f"tool call {i} arguments {bad}", "read the raw text; rerun"))
    return found


def check_raw(data: Any, probe: Probe, stop_ids: tuple[int, ...] = kf.STOP_IDS) -> list[Finding]:
    """Every rule a /generate answer for ``probe`` must meet (an empty list: it holds); ``stop_ids``: the family's."""
    if not isinstance(data, dict):
        return [
            problem(
                "raw_malformed",
                f"/generate answered a JSON {json_kind(data)}, not an object (n=1 gives one object)",
                "point --host at SGLang's native server",
            )
        ]
    text, ids = data.get("text"), data.get("output_ids")
    if not isinstance(text, str):
        return [problem("raw_malformed", "the /generate answer has no text", "point --host at SGLang's /generate")]
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) for i in ids):
        return [
            problem(
                "raw_no_output_ids",
                f"the /generate answer has no output_ids (it is {wire.shown(ids, 'missing')})",
                "point --host at SGLang 0.5.23's native /generate (it returns output_ids)",
            )
        ] + _meta_findings(data, stop_ids)
    thinking = (probe.template_kwargs or {}).get("thinking", True) is not False
    found = _meta_findings(data, stop_ids) + _think_findings(text, ids, thinking)
    turn = kf.parse_raw(text, thinking=thinking)
    found += [problem("raw_format", f"not Kimi's raw format: {p}", "read the raw text") for p in turn.problems]
    if kf.IM_END in text:
        found.append(
            problem(
                "raw_stop_in_text",
                "<|im_end|> is part of the text: the stop token was not trimmed",
                "point --host at SGLang's /generate",
            )
        )
    if thinking and turn.reasoning is not None and not turn.reasoning.strip():
        found.append(
            problem(
                "raw_empty_reasoning",
                "nothing before </think>: the reasoning is empty",
                "keep thinking on (the prompt ends with <think>); rerun",
            )
        )
    if probe.tools:
        if not turn.section:
            found.append(
                problem(
                    "raw_no_tool_section",
                    f"no <|tool_calls_section_begin|> in the text: {clip(text)!r}",
                    "the model answered in text; rerun",
                )
            )
        elif kf.SECTION_BEGIN_ID not in ids:
            found.append(
                problem(
                    "raw_section_not_one_id",
                    "<|tool_calls_section_begin|> is in the text but 163595 is not in output_ids",
                    "serve Kimi-K2.5's own tokenizer",
                )
            )
        found += _call_findings(turn, {t["function"]["name"] for t in probe.tools})
    elif not turn.content.strip():
        found.append(problem("raw_empty_content", "nothing after </think>: the answer is empty", "rerun"))
    return found


RAW_PROBES = (
    Probe("raw-reasoning", REASONING.messages, REASONING.check, modes=(GENERATE,)),
    Probe("raw-tool", TOOL.messages, TOOL.check, modes=(GENERATE,), tools=tuple(WEATHER_TOOLS)),
)


def run_raw_probe(
    probe: Probe,
    target: Any,
    *,
    api_key: str | None,
    deadline: float,
    timeout: float,
    stop_ids: tuple[int, ...] = kf.STOP_IDS,
) -> ProbeResult:
    posted = post(target, "/generate", generate_body(probe), api_key=api_key, deadline=deadline, timeout=timeout)
    if posted.failure is not None:
        return ProbeResult(probe.name, GENERATE, posted.latency_s, (posted.failure,), unreachable=posted.unreachable)
    found = check_raw(posted.data, probe, stop_ids)
    return ProbeResult(probe.name, GENERATE, posted.latency_s, tuple(dict.fromkeys(found)))
