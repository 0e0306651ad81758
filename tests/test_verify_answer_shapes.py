"""The cheap checks quick runs on every answer, pure functions on hand-written text: the SSE grammar the openai SDK's
reader accepts (verify/sse.py), think markers of every Kimi family and content that repeats the reasoning
(verify/thinking.py, diagnose.text_findings). The same constructs over HTTP: tests/test_verify_contract.py; the
SDK's own verdict on them: tests/test_verify_sdk_agreement.py."""

from __future__ import annotations

import pytest

from kimi_serve.verify.answer import Answer
from kimi_serve.verify.diagnose import text_findings
from kimi_serve.verify.sse import events
from kimi_serve.verify.thinking import echoed_reasoning, marker

CHUNK = '{"object": "chat.completion.chunk", "choices": []}'


def _faults(body: str) -> list[str | None]:
    return [e.fault for e in events(body.encode())]


def test_the_sdk_grammar_reads_fields_next_to_data_and_any_line_end() -> None:
    for body in (
        f"id: 1\ndata: {CHUNK}\n\nid: 2\ndata: [DONE]\n\n",
        f": keep-alive\n\ndata: {CHUNK}\n\n: keep-alive\n\n",  # comments without ids: nothing dispatched
        f"retry: 3000\nevent: message\ndata: {CHUNK}\n\n",
        f"data: {CHUNK}\r\n\r\ndata: {CHUNK}\r\rfoo: bar\n\n",
        f"id: 1\n: ka\ndata: {CHUNK}\n\n",  # a comment line inside an event, no blank line after it
        "id: 1\ndata: [DONE]\n\n: keep-alive\n\n",  # after [DONE] the SDK reads nothing
    ):
        assert all(f is None for f in _faults(body)), body
    assert [e.data for e in events(b'data: {"a": "x\xe2\x80\xa8y"}\n\n')] == ['{"a": "x\u2028y"}']  # U+2028 stays
    assert events(f"data: {CHUNK}".encode()) == []  # no blank line: not dispatched, as in the SDK


@pytest.mark.parametrize(
    "body, words",
    [
        (f"id: 7\ndata: {CHUNK}\n\n: keep-alive\n\n", "comment keep-alive"),
        (f"id: 7\ndata: {CHUNK}\n\n\n", "extra blank line after an event id"),
        (f"retry: 3000\n\ndata: {CHUNK}\n\n", "`retry:` directive in a block of its own"),
        (f"event: ping\n\ndata: {CHUNK}\n\n", "`event: ping` block without a `data:` line"),
        (f"id: 0\n\ndata: {CHUNK}\n\n", "`id:` line in a block of its own"),
        (f"event: thread.run\ndata: {CHUNK}\n\n", "`event: thread.run` name"),
    ],
)
def test_each_construct_the_sdk_fails_on_is_named(body: str, words: str) -> None:
    faults = [f for f in _faults(body) if f]
    assert len(faults) == 1 and words in faults[0]


@pytest.mark.parametrize(
    "text, family",
    [
        ("<think>r</think>391", "Kimi-K2/K2.5"),
        ("◁think▷r◁/think▷391", "Kimi-VL"),
        ("<|open|>think<|sep|>r<|close|>think<|sep|>391", "Kimi K3"),
    ],
)
def test_every_kimi_think_marker_family_is_found_and_named(text: str, family: str) -> None:
    hit = marker(text)
    assert hit is not None and family in hit[1].name
    (finding,) = text_findings(Answer(content=text, finish_reason="stop"), {})  # one finding, no special_token_leak
    assert finding.code == "think_in_content" and (family == "Kimi-K2/K2.5" or "gateway" in finding.message)
    assert marker("I think the answer is 391 <thinking aloud>") is None


REASONING = "17 * 23 = 17 * 20 + 17 * 3 = 340 + 51 = 391."


@pytest.mark.parametrize(
    "content, echoed",
    [
        (f"{REASONING}\n\n391", True),
        (f"<think>{REASONING}</think>391", True),
        (f"Thinking:\n  {REASONING.replace(' ', '  ')}\nAnswer: 391", True),
        ("391", False),
        ("17 * 23 = 340 + 51 = 391.", False),  # a summary, not a copy
    ],
)
def test_content_that_repeats_the_reasoning(content: str, echoed: bool) -> None:
    assert echoed_reasoning(content, REASONING) is echoed
    codes = [f.code for f in text_findings(Answer(content=content, reasoning=REASONING, finish_reason="stop"), {})]
    assert ("reasoning_in_content" in codes) is echoed


def test_short_or_long_reasoning_echo_bounds() -> None:
    assert not echoed_reasoning("391", "391")  # too short to tell an echo from a coincidence
    long = "Let me work this out carefully, one partial product at a time. " * 5
    assert echoed_reasoning(long[:100] + " ... 391", long)  # a long reasoning's head at the start of content
