"""`kimi-serve chat` against SGLang 0.5.23's own serving layer (the simulator): with prod's flags the answer streams
with its reasoning apart and a tool call shown as its name and JSON arguments (exit 0); the same server started
without the Kimi parsers sends raw Kimi markup, which chat names with the flags that fix it (exit 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sim_pool import SimulatorPool, prod_flags

from kimi_serve.verify.chat import RAW_MARKUP

STEP = "0.001"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


@pytest.fixture
def tools(tmp_path: Path) -> str:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(TOOLS))
    return str(path)


def test_prod_flags_answer_with_reasoning_apart_and_a_structured_call(
    cli, simulator_pool: SimulatorPool, tools: str
) -> None:  # type: ignore[no-untyped-def]
    sim = simulator_pool.get(prod_flags(), step=STEP)
    res = cli("chat", "--host", sim.base_url, "--tools", tools, "What is the weather in Paris? Use get_weather.")
    assert res.code == 0, res.err
    assert 'tool call: get_weather {"city": "Paris"}' in res.out
    assert "[reasoning] " in res.err and "get_weather" in res.err and RAW_MARKUP not in res.err
    res = cli("chat", "--host", sim.base_url, "What is 2+2?")
    assert res.code == 0 and "What is 2+2?" in res.out and "tool call" not in res.out, res


def test_a_server_without_the_parsers_is_named(cli, simulator_pool: SimulatorPool, tools: str) -> None:  # type: ignore[no-untyped-def]
    sim = simulator_pool.get(prod_flags("--tool-call-parser", "--reasoning-parser"), step=STEP)
    res = cli("chat", "--host", sim.base_url, "--tools", tools, "What is the weather in Paris? Use get_weather.")
    assert res.code == 1, (res.out, res.err)
    assert RAW_MARKUP in res.err and "<|tool_call" in res.out
