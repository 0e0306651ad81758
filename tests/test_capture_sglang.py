"""`kimi-serve capture` against SGLang 0.5.23's own serving layer (the pooled simulator with prod's flags: the kimi_k2
parsers, EAGLE-3): a mixed prompt set gives one exact record per prompt (plain, reasoning, a tool call, parallel calls,
a tool follow-up with its history, a ShareGPT row, an answer cut at max_tokens), a server error is a reject and the
run goes on; a SIGKILL at a record boundary, twice, then the same command gives every record exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from sim_pool import SimulatorPool, prod_flags
from test_capture import specforge_problems

from kimi_serve.verify import kimi_format as kf

STEP = "0.001"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
READ = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}
CALL = {
    "id": "functions.get_weather:0",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
ASK = "What is the weather in Paris? Use get_weather."
PROMPTS: list[dict[str, Any]] = [
    {"id": "plain", "messages": [{"role": "user", "content": "Say hello in one sentence."}], "thinking": False},
    {"id": "reasoning", "messages": [{"role": "user", "content": "What is 17 * 23?"}], "temperature": 0.0},
    {"id": "tool", "messages": [{"role": "user", "content": ASK}], "tools": [WEATHER]},
    {"id": "parallel", "messages": [{"role": "user", "content": "Open README.md and src/app.py"}], "tools": [READ]},
    {
        "id": "follow-up",
        "tools": [WEATHER],
        "messages": [
            {"role": "user", "content": ASK},
            {"role": "assistant", "content": "", "reasoning_content": "I call get_weather.", "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": CALL["id"], "content": '{"temp_c": 18, "sky": "clear"}'},
        ],
    },
    {"id": "sharegpt", "conversations": [{"from": "human", "value": "Name a prime."}, {"from": "gpt", "value": "7"}]},
    {"id": "cut", "messages": [{"role": "user", "content": "Explain TCP slow start."}], "max_tokens": 5},
    {"id": "server-error", "messages": [{"role": "user", "content": "hi"}], "temperature": -1},
]


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _records(out: Path) -> dict[str, dict[str, Any]]:
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    by_id = {r["id"]: r for r in rows}
    assert len(by_id) == len(rows), "an id recorded twice"
    return by_id


def test_a_mixed_prompt_set_gives_one_exact_record_per_prompt(
    cli, simulator_pool: SimulatorPool, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    sim = simulator_pool.get(prod_flags(), step=STEP)
    prompts, out = _write(tmp_path / "prompts.jsonl", PROMPTS), tmp_path / "out"
    res = cli("capture", "--host", sim.base_url, "--prompts", str(prompts), "--out", str(out), "--concurrency", "3")
    assert res.code == 1, res  # one prompt failed: the exit code says not all succeeded
    assert "records: 7 of 8 prompts" in res.out and "1 http_400" in res.out, res.out
    records = _records(out)
    assert sorted(records) == sorted(p["id"] for p in PROMPTS[:-1])
    assert specforge_problems(out / "records.jsonl") == []
    for ident, r in records.items():
        meta, ids, mask = r["meta"], r["input_ids"], r["loss_mask"]
        prompt_len = meta["prompt_tokens"]
        assert len(mask) == len(ids) == prompt_len + meta["output_tokens"], ident
        assert mask == [0] * prompt_len + [1] * meta["output_tokens"], ident
        output = ids[prompt_len:]
        assert meta["server"] == sim.base_url and meta["model"] and meta["acceptance"]["spec_verify_ct"] > 0, ident
        if ident == "cut":
            assert meta["finish_reason"] == "length" and output[-1] not in kf.STOP_IDS and meta["output_tokens"] == 5
            continue
        assert output[-1] == kf.IM_END_ID and meta["stopped"], ident  # ends in the stop id
        thinking = ident != "plain"
        assert output.count(kf.THINK_END_ID) == (1 if thinking else 0) and meta["reasoned"] is thinking, ident
        assert ids[prompt_len - 1] == kf.THINK_ID or not thinking  # the prompt opens the reasoning, as served
        calls = {"tool": 1, "parallel": 2}.get(ident, 0)
        assert meta["calls"] == calls and output.count(kf.SPECIAL_IDS[kf.CALL_BEGIN]) == calls, ident
        assert (kf.SECTION_BEGIN_ID in output) is bool(calls) and meta["kind"] == ("tool_call" if calls else "prose")
    follow = records["follow-up"]["input_ids"][: records["follow-up"]["meta"]["prompt_tokens"]]
    assert follow.count(kf.SECTION_BEGIN_ID) == 1 and follow.count(kf.THINK_END_ID) >= 1  # the history, as served
    (reject,) = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert reject["id"] == "server-error" and reject["cause"] == "http_400" and reject["line"] == 8
    assert "temperature" in reject["reason"]
    again = cli("capture", "--host", sim.base_url, "--prompts", str(prompts), "--out", str(out), "--json")
    doc = json.loads(again.out)
    assert again.code == 1 and doc["records"] == 7 and doc["written"] == 0 and doc["failures"] == {"http_400": 1}
    assert doc["acceptance_by_kind"] == {"tool_call": None, "prose": None}  # nothing new was captured
    assert len(_records(out)) == 7 and len((out / "rejects.jsonl").read_text().splitlines()) == 1  # retried, once


def test_sigkill_at_record_boundaries_then_the_same_command_gives_each_record_once(
    simulator_pool: SimulatorPool, tmp_path: Path
) -> None:
    sim = simulator_pool.get(prod_flags(), step=STEP)
    rows = [{"id": f"p{i}", "messages": [{"role": "user", "content": f"What is {i} + {i}?"}]} for i in range(6)]
    prompts, out = _write(tmp_path / "prompts.jsonl", rows), tmp_path / "out"
    argv = [sys.executable, "-m", "kimi_serve", "capture", "--host", sim.base_url, "--prompts", str(prompts)]
    argv += ["--out", str(out), "--concurrency", "3"]
    seen = []
    # checkpoints: capture.record before a record's write, capture.record.fsynced after its fsync; kill at the 3rd
    # (after the first record, before the second's write, two requests in flight), then at the 2nd of the rerun
    for hook in ("kill-at=3", "kill-at=2", ""):
        env = {**os.environ, "KIMI_SERVE_TEST_HOOK": hook} if hook else dict(os.environ)
        env.pop("KIMI_SERVE_TEST_HOOK", None) if not hook else None
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        seen.append(len(_records(out)) if (out / "records.jsonl").exists() else 0)
        assert done.returncode == (-9 if hook else 0), (hook, done.stderr)
    assert seen == [1, 2, 6], seen
    assert sorted(_records(out)) == [r["id"] for r in rows]  # no gap, no duplicate
    assert specforge_problems(out / "records.jsonl") == []
