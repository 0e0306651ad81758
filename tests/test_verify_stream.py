"""SSE reassembly and the per-answer rules, on hand-written wire text (SGLang 0.5.23 shapes, docs/verify.md)."""

from __future__ import annotations

import json

from kimi_serve.verify.answer import answer_from_json
from kimi_serve.verify.probes import LARGE_ARG, TOOL
from kimi_serve.verify.stream import answer_from_sse


def _sse(*deltas: dict, finish: str | None = "tool_calls", done: bool = True) -> bytes:
    head = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "kimi-k2.5"}
    chunks = [{**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    if finish:
        chunks.append(
            {**head, "choices": [{"index": 0, "delta": {"reasoning_content": None}, "finish_reason": finish}]}
        )
    text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)
    return (text + ("data: [DONE]\n\n" if done else "")).encode()


def test_tool_call_fragments_are_joined_by_index() -> None:
    body = _sse(
        {"role": "assistant", "content": "", "reasoning_content": None},
        {"reasoning_content": "Need two "},
        {"reasoning_content": "calls."},
        {
            "tool_calls": [
                {
                    "id": "functions.get_weather:0",
                    "index": 0,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ""},
                }
            ]
        },
        {
            "tool_calls": [
                {
                    "id": "functions.get_weather:1",
                    "index": 1,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": '},
                }
            ]
        },
        {
            "tool_calls": [
                {"id": None, "index": 0, "type": "function", "function": {"name": None, "arguments": '{"city": '}}
            ]
        },
        {"tool_calls": [{"id": None, "index": 0, "function": {"name": None, "arguments": '"Paris"}'}}]},
        {"tool_calls": [{"index": 1, "function": {"arguments": '"Tokyo"}'}}]},
    )
    answer = answer_from_sse(body)
    assert answer.problems == []
    assert answer.reasoning == "Need two calls." and answer.content == ""
    assert [(c.id, c.index, c.name, c.arguments) for c in answer.tool_calls] == [
        ("functions.get_weather:0", 0, "get_weather", '{"city": "Paris"}'),
        ("functions.get_weather:1", 1, "get_weather", '{"city": "Tokyo"}'),
    ]
    assert answer.finish_reason == "tool_calls"


def test_stream_faults_are_named() -> None:
    truncated = answer_from_sse(_sse({"content": "hi"}, finish=None, done=False), cut=True)
    assert {p.code for p in truncated.problems} == {"stream_no_done", "stream_no_finish_reason"}
    assert "connection broke" in truncated.problems[0].message
    garbage = answer_from_sse(b"data: {not json\n\ndata: [DONE]\n\n")
    assert garbage.problems[0].code == "stream_bad_chunk" and "{not json" in garbage.problems[0].message
    error = answer_from_sse(b'data: {"error": {"message": "out of memory"}}\n\ndata: [DONE]\n\n')
    assert error.problems[0].code == "stream_error" and "out of memory" in error.problems[0].message
    not_sse = answer_from_sse(b'{"choices": []}')
    assert not_sse.problems[0].code == "stream_not_sse"
    no_index = answer_from_sse(
        _sse({"tool_calls": [{"id": "x", "function": {"name": "get_weather", "arguments": "{}"}}]})
    )
    assert "stream_tool_index" in {p.code for p in no_index.problems}


def test_other_reasoning_fields_are_kept_apart() -> None:
    streamed = answer_from_sse(_sse({"role": "assistant", "reasoning": "hmm"}, {"content": "391"}, finish="stop"))
    assert streamed.reasoning is None and streamed.other_reasoning == {"reasoning": "hmm"}
    plain = answer_from_json(
        {
            "choices": [
                {
                    "finish_reason": "stop",
                    "message": {
                        "role": "assistant",
                        "content": "391",
                        "reasoning_content": None,
                        "reasoning_text": "hmm",
                    },
                }
            ]
        }
    )
    assert plain.other_reasoning == {"reasoning_text": "hmm"}


def test_legitimate_tool_turn_shapes_pass_the_tool_rules() -> None:
    answer = answer_from_json(
        {
            "choices": [
                {
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": "Let me check.",
                        "reasoning_content": None,
                        "tool_calls": [
                            {
                                "id": "call_0123456789abcdef01234567",
                                "type": "function",
                                "function": {
                                    "name": "get_weather",
                                    "arguments": '{"city": "Paris", "unit": "celsius"}',
                                },
                            }
                        ],
                    },
                }
            ]
        }
    )
    assert TOOL.check(answer, {}) == []


def test_argument_longer_than_json_on_one_line_is_shown_clipped() -> None:
    args = '{"city": "' + "x" * 500
    answer = answer_from_json(
        {
            "choices": [
                {
                    "finish_reason": "tool_calls",
                    "message": {
                        "content": "",
                        "tool_calls": [
                            {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": args}}
                        ],
                    },
                }
            ]
        }
    )
    finding = TOOL.check(answer, {})[0]
    assert finding.code == "arguments_not_json"
    assert '{"city": "xxx' in finding.message and "(510 chars)" in finding.message


def test_large_argument_rules() -> None:
    def turn(content: str) -> object:
        args = json.dumps({"path": "count.txt", "content": content})
        return answer_from_sse(
            _sse(
                {"role": "assistant"},
                {
                    "tool_calls": [
                        {
                            "id": "functions.write_file:0",
                            "index": 0,
                            "type": "function",
                            "function": {"name": "write_file", "arguments": args},
                        }
                    ]
                },
            )
        )

    full = " ".join(str(i) for i in range(1, 2001))
    assert LARGE_ARG.check(turn(full), {}) == []
    assert LARGE_ARG.check(turn("1 2 3"), {})[0].code == "argument_small"
    gap = LARGE_ARG.check(turn(full.replace(" 1000 1001 ", " ")), {})[0]
    assert gap.code == "argument_corrupt" and "after 999 comes '1002', expected 1000" in gap.message


def test_reasoning_missing_names_the_cause_the_server_reports() -> None:
    from kimi_serve.verify.probes import REASONING

    answer = answer_from_json(
        {
            "choices": [
                {
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "17*23: 340+51=391. 391", "reasoning_content": None},
                }
            ]
        }
    )
    unset = REASONING.check(answer, {"reasoning_parser": None})[0]
    assert unset.code == "reasoning_missing" and "--reasoning-parser kimi_k2" in unset.fix
    assert "the server reports no reasoning_parser" in unset.message
    stripped = REASONING.check(answer, {"reasoning_parser": "kimi_k2"})[0]
    assert stripped.code == "reasoning_missing" and "stripped" in stripped.message
    assert "skip_special_tokens" in stripped.fix
