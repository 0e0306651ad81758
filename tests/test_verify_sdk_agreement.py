"""verify's verdict equals the official openai SDK's on the same bytes (the corpus in tests/sdk_corpus.py).

The reference consumer is the real SDK: ``client.chat.completions.stream(...)`` (its ``ChatCompletionStreamState``
accumulator, the chunk filter and ``get_final_completion``) or ``client.chat.completions.create(...)``, reading the
corpus bytes through httpx's in-process transport (the SDK's own SSE decoder and models run; no network). It "reads a
turn correctly" when nothing raises and what a client takes from the result (role, content, reasoning_content, each
call's id, type, name and ``json.loads(arguments)``, finish_reason) is the turn that was sent. verify must pass exactly
those bodies, and fail the others leading with the finding that names the cause. A case with a ``Content-Encoding``
is sent with that header; verify reads its body as its transport does (decoded, or the encoding fault).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from sdk_corpus import CASES, TOOL_TURN, Case, Truth, _edit, sdk_final_completion, sglang_chunks, sse

from kimi_serve.core.http import Reply
from kimi_serve.core.http_body import LIMITS, ReadBudget, decode
from kimi_serve.verify.answer import answer_from_json
from kimi_serve.verify.exchange import judge
from kimi_serve.verify.http_findings import http_finding
from kimi_serve.verify.probes import REASONING, TOOL
from kimi_serve.verify.stream import answer_from_sse

pytest.importorskip("openai")


def _view(choice: Any) -> dict[str, Any]:
    """What a client reads from the SDK's choice (json.loads on arguments, as every tool runner does)."""
    message = choice.message
    return {
        "role": message.role,
        "content": message.content or "",
        "reasoning": getattr(message, "reasoning_content", None),
        "calls": [(c.id, c.type, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []],
        "finish": choice.finish_reason,
    }


def _expected(truth: Truth) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": truth.content,
        "reasoning": truth.reasoning,
        "calls": [(cid, "function", name, args) for cid, name, args in truth.calls],
        "finish": truth.finish,
    }


def sdk_reads(case: Case) -> tuple[bool, str]:
    """(read correctly, what happened) for the official SDK on ``case.body``."""
    try:
        view = _view(sdk_final_completion(case.body, stream=case.stream, encoding=case.encoding).choices[0])
    except Exception as exc:  # noqa: BLE001 - any exception is the SDK (or its client) failing to read the turn
        return False, f"raised {type(exc).__name__}: {exc}"
    if view != _expected(case.truth):
        return False, f"read {view}"
    return True, "read the turn"


def verify_judges(case: Case) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    body = case.body
    if case.encoding:  # the body as verify's transport reads it, and the finding when it does not decode
        body, fault, _limit = decode(case.encoding, body, LIMITS, ReadBudget(LIMITS.total_bytes))
        content_type = "text/event-stream" if case.stream else "application/json"
        reply = Reply(200, content_type, body, encoding_fault=fault)
        failure = http_finding(reply, api_key_sent=False, model="kimi-k2.5")
        if failure:
            return (failure,), ()
    answer = answer_from_sse(body) if case.stream else answer_from_json(json.loads(body))
    probe = TOOL if case.truth.probe == "tool" else REASONING
    return judge(probe, answer, {})


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_verify_agrees_with_the_openai_sdk(case: Case) -> None:
    sdk_ok, what = sdk_reads(case)
    assert sdk_ok == case.sdk_reads_it, f"the SDK no longer behaves as pinned: {what}"
    failures, _warnings = verify_judges(case)
    assert (not failures) == sdk_ok, f"SDK: {what}; verify: {[f.line() for f in failures]}"
    if not sdk_ok:
        assert failures[0].code == case.code, [f.line() for f in failures]
        assert failures[0].fix


def test_the_corpus_holds_both_verdicts_for_each_shape() -> None:
    assert {c.sdk_reads_it for c in CASES if c.stream} == {True, False}
    assert {c.sdk_reads_it for c in CASES if not c.stream} == {True, False}


def test_diagnoses_say_what_is_wrong() -> None:
    by_name = {c.name: c for c in CASES}
    failures, _ = verify_judges(by_name["arguments-object-json"])
    assert "arguments is a JSON object, not a string" in failures[0].message
    assert "''" not in failures[0].message
    failures, _ = verify_judges(by_name["proxy-repeats-id"])
    assert "'functions.get_weather:0functions.get_weather:0'" in failures[0].message
    failures, _ = verify_judges(by_name["tool-index-from-1"])
    assert "IndexError" in failures[0].message


def test_a_clean_end_without_done_is_a_warning_not_a_failure() -> None:
    case = next(c for c in CASES if c.name == "done-missing-after-finish")
    failures, warnings = verify_judges(case)
    assert failures == () and [w.code for w in warnings] == ["stream_null_tool_fields", "stream_no_done"]
    assert {w.status for w in warnings} == {"warn"}


def test_an_unpatched_sglang_stream_is_reported_and_a_patched_one_is_not() -> None:
    """SGLang 0.5.23 sends "id": null, "name": null in argument deltas (Kimi patch 0002 removes the keys): a warning
    naming the Kimi patch set, never a failure (the SDK reads both)."""
    by_name = {c.name: c for c in CASES}
    failures, warnings = verify_judges(by_name["sglang-tool"])
    assert failures == () and [w.code for w in warnings] == ["stream_null_tool_fields"]
    assert "sglang-0.5.23-kimi" in warnings[0].fix
    patched = Case("patched", sse(_edit(sglang_chunks(TOOL_TURN), _drop_null_ids)), True, TOOL_TURN, True)
    assert sdk_reads(patched)[0]
    assert verify_judges(patched) == ((), ())


def _drop_null_ids(chunks: list[dict[str, Any]]) -> None:
    for c in chunks:
        for choice in c["choices"]:
            for tc in (choice["delta"] or {}).get("tool_calls") or []:
                if tc.get("id") is None:
                    del tc["id"]
                    del tc["function"]["name"]
