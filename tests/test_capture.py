"""`kimi-serve capture` without a server: the prompts file's errors (file:line and key, exit 2), ShareGPT rows and
Kimi's thinking switch, the output files' resume rules (a torn last line cut, never a partial record, a full disk named),
the lossless check on answers built the way the parsers split them, and `bench` taking a capture prompts file.
The records checked against SpecForge's pre-tokenized loader rules come from the simulator: tests/test_capture_sglang.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from kimi_serve.capture import record as rec
from kimi_serve.capture import store
from kimi_serve.capture.prompts import PromptError, parse_prompts
from kimi_serve.core.errors import KimiServeError
from kimi_serve.verify import kimi_format as kf

GOOD = {"id": "a", "messages": [{"role": "user", "content": "hi"}]}


def specforge_problems(path: Path) -> list[str]:
    """SpecForge's rules for a pre-tokenized prompts file (``data.prompts_path``; specforge/data/prompt_builder.py):
    JSON objects, one a line, blank lines skipped; the first holds both ``input_ids`` and ``loss_mask``; each a
    one-dimensional list of integers (no booleans among the ids), the mask 0 or 1 only, equal non-zero lengths; a
    record with fewer than one trainable token is dropped, counted here as a problem (capture must not write one)."""
    problems: list[str] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            problems.append(f"{number}: invalid JSON")
            continue
        if not isinstance(row, dict) or "input_ids" not in row or "loss_mask" not in row:
            problems.append(f"{number}: not an object with input_ids and loss_mask")
            continue
        ids, mask = row["input_ids"], row["loss_mask"]
        if not isinstance(ids, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
            problems.append(f"{number}: input_ids is not a list of integers")
        if not isinstance(mask, list) or any(isinstance(m, bool) or m not in (0, 1) for m in mask):
            problems.append(f"{number}: loss_mask is not 0/1 integers")
        if isinstance(ids, list) and isinstance(mask, list) and (len(ids) != len(mask) or not ids):
            problems.append(f"{number}: lengths {len(ids)} != {len(mask)} or empty")
        if isinstance(mask, list) and sum(m for m in mask if isinstance(m, int)) < 1:
            problems.append(f"{number}: no trainable token (SpecForge drops it)")
    return problems


def test_the_specforge_rules_catch_what_the_loader_refuses(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    rows = [
        {"id": "ok", "input_ids": [1, 2], "loss_mask": [0, 1]},
        {"id": "len", "input_ids": [1, 2], "loss_mask": [1]},
        {"id": "mask", "input_ids": [1, 2], "loss_mask": [0, 2]},
        {"id": "bool", "input_ids": [True, 2], "loss_mask": [0, 1]},
        {"id": "none", "input_ids": [1], "loss_mask": [0]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{\n")
    assert [p.split(":")[0] for p in specforge_problems(path)] == ["2", "3", "4", "5", "6"]


@pytest.mark.parametrize(
    ("line", "where", "said"),
    [
        ("{not json", ":2", "not JSON"),
        (json.dumps({**GOOD, "id": "b", "reasoning": True}), ":2: reasoning", "unknown key 'reasoning'"),
        (json.dumps({"id": "b", "messages": [{"role": "tool", "content": "x"}]}), "messages[0].tool_call_id", "id"),
        (
            json.dumps(
                {"id": "b", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
            ),
            "messages[1].role",
            "nothing for the model to answer",
        ),
        (json.dumps(GOOD), ":2: id", "also on line 1"),
        (json.dumps({"id": "b", "conversations": [{"from": "robot", "value": "x"}]}), "conversations[0].from", "robot"),
        (json.dumps({**GOOD, "id": "b", "thinking": "yes"}), ":2: thinking", "not true or false"),
    ],
)
def test_a_bad_prompt_line_is_one_line_naming_file_line_and_key(
    cli, tmp_path: Path, line: str, where: str, said: str
) -> None:  # type: ignore[no-untyped-def]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps(GOOD) + "\n" + line + "\n")
    res = cli("capture", "--host", "127.0.0.1:9", "--prompts", str(prompts), "--out", str(tmp_path / "out"))
    assert res.code == 2, res
    assert f"{prompts}:2" in res.err and where in res.err and said in res.err, res.err
    assert "Traceback" not in res.err and len(res.err.strip().splitlines()) <= 2
    assert not (tmp_path / "out").exists()  # nothing written for a bad input


def test_sharegpt_rows_and_kimis_thinking_switch() -> None:
    text = "\n".join(
        json.dumps(r)
        for r in (
            {"conversations": [{"from": "human", "value": "q1"}, {"from": "gpt", "value": "a1"}]},
            {"id": 7, "messages": [{"role": "user", "content": "q"}], "enable_thinking": False},
            {"id": "k", "messages": [{"role": "user", "content": "q"}], "chat_template_kwargs": {"enable_thinking": 0}},
        )
    )
    share, switched, kwargs = parse_prompts(text, "p.jsonl")
    assert share.id == "line-1" and share.body["messages"] == [{"role": "user", "content": "q1"}]  # answer dropped
    assert switched.id == "7" and switched.body["chat_template_kwargs"] == {"thinking": False} and not switched.thinking
    assert kwargs.body["chat_template_kwargs"] == {"thinking": 0}
    with pytest.raises(PromptError, match="no prompt"):
        parse_prompts("\n\n", "p.jsonl")


def _record(ident: str) -> dict[str, Any]:
    return {"id": ident, "input_ids": [1, 2, 3], "loss_mask": [0, 1, 1], "meta": {}}


def test_a_torn_last_line_is_cut_and_each_id_counted_once(tmp_path: Path) -> None:
    path = tmp_path / store.RECORDS
    whole = "".join(json.dumps(_record(i)) + "\n" for i in ("a", "b"))
    path.write_text(whole + json.dumps(_record("c"))[:17])  # killed during the write of c
    assert store.done_ids(path) == {"a", "b"}
    assert path.read_text() == whole  # cut back to the last whole record
    path.write_text(whole + '{"id": "c", "input_ids": [1,\x00\x00\x00\n')  # a garbled last line: torn too
    assert store.done_ids(path) == {"a", "b"} and path.read_text() == whole
    path.write_text(json.dumps(_record("a")) + "\nnot json\n" + json.dumps(_record("b")) + "\n")
    with pytest.raises(KimiServeError, match=rf"{path}:2: not a JSON record line") as bad:
        store.done_ids(path)
    assert bad.value.exit_code == 2
    path.write_text(whole + json.dumps(_record("a")) + "\n")
    with pytest.raises(KimiServeError, match=rf"{path}:3: id 'a' is recorded twice"):
        store.done_ids(path)


def test_a_full_disk_is_named_and_never_leaves_a_partial_record(tmp_path: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this host")
    (tmp_path / store.RECORDS).symlink_to("/dev/full")  # every write fails with ENOSPC, as on a full disk
    out = store.Appender(tmp_path / store.RECORDS)
    try:
        with pytest.raises(KimiServeError) as full:
            out.append(_record("a"), "capture.record")
    finally:
        out.close()
    assert full.value.exit_code == 5 and "'a'" in full.value.message and str(tmp_path) in full.value.message
    assert "free space" in (full.value.hint or "")
    real = tmp_path / "real.jsonl"
    ok = store.Appender(real)
    ok.append(_record("a"), "capture.record")
    ok.close()
    assert store.done_ids(real) == {"a"} and os.stat(real).st_mode & 0o777 == 0o644


def _answer(message: dict[str, Any], output_ids: list[int]) -> rec.ServedIds:
    return rec.ServedIds(message, "stop", {}, [kf.THINK_ID], output_ids, None)


def test_the_lossless_check_keeps_exact_answers_and_names_a_lost_fragment() -> None:
    (prompt,) = parse_prompts(json.dumps(GOOD), "p.jsonl")
    call = {"id": "functions.f:0", "function": {"name": "f", "arguments": '{"a": 1}'}}
    raw = f'think{kf.THINK_END}{kf.SECTION_BEGIN}{kf.CALL_BEGIN}functions.f:0{kf.ARG_BEGIN}{{"a": 1}}'
    raw += f"{kf.CALL_END}{kf.SECTION_END}"
    ids = [5, kf.THINK_END_ID, kf.SECTION_BEGIN_ID, kf.IM_END_ID]
    answer = _answer({"reasoning_content": "think", "content": "", "tool_calls": [call]}, ids)
    assert rec.text_ids(answer) == ids[:-1]  # the stop id is not in the text
    assert rec.lossless(prompt, answer, raw) is None
    cut = _answer({"reasoning_content": "The user", "content": ""}, [5, 6])  # max_tokens inside the reasoning
    assert rec.lossless(prompt, cut, "The user") is None
    spaced = {
        "reasoning_content": "think",
        "content": "",
        "tool_calls": [{**call, "function": {"arguments": '{"a":1}'}}],
    }
    lost = rec.lossless(prompt, _answer(spaced, ids), raw)
    assert lost is not None and lost.cause == "lossless_mismatch" and "whitespace" in lost.message
    record = rec.build_record(prompt, answer, {"profile": None, "server": "s", "model": "m"})
    assert record["input_ids"] == [kf.THINK_ID, *ids] and record["loss_mask"] == [0, 1, 1, 1, 1]
    assert record["meta"]["calls"] == 1 and record["meta"]["reasoned"] and record["meta"]["stopped"]
    assert rec.read_answer(prompt, {"choices": [{"message": {"content": "x"}}]}).cause == "no_ids"  # type: ignore[union-attr]


def test_a_server_that_is_not_there_is_exit_3(cli, tmp_path: Path, loopback_port) -> None:  # type: ignore[no-untyped-def]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps(GOOD) + "\n")
    res = cli("capture", "--host", f"127.0.0.1:{loopback_port()}", "--prompts", str(prompts), "--out", str(tmp_path))
    assert res.code == 3, res
    assert store.done_ids(tmp_path / store.RECORDS) == set()


def test_bench_takes_a_capture_prompts_file(tmp_path: Path) -> None:
    from kimi_serve.bench.workload import prepare

    prompts = tmp_path / "prompts.jsonl"
    rows = [
        {"id": "x", "messages": [{"role": "user", "content": "q"}], "thinking": False, "max_tokens": 64},
        {"id": "y", "conversations": [{"from": "human", "value": "q2"}, {"from": "gpt", "value": "a2"}]},
    ]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    workload = prepare(str(prompts), 2, tmp_path)
    assert workload.name == "prompts.jsonl" and workload.path is not None
    sent = [json.loads(line) for line in workload.path.read_text().splitlines()]
    assert sent == [
        {"messages": [{"role": "user", "content": "q"}], "max_tokens": 64, "chat_template_kwargs": {"thinking": False}},
        {"messages": [{"role": "user", "content": "q2"}]},
    ]
    assert workload.args[-1] == str(workload.path)
