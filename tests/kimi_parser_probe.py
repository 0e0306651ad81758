"""Drive SGLang 0.5.23's own OpenAI serving layer and kimi_k2 parsers, in one copy of the sglang package, into each
kimi_k2 parser fault the Kimi patch set (patches/sglang-0.5.23-kimi) fixes; prints one JSON object.

Run with the CPU SGLang interpreter: ``python kimi_parser_probe.py SITE_DIR REPO_DIR``. SITE_DIR goes first on
sys.path (this copy of sglang, patched or not), REPO_DIR next (kimi_serve). The app is the simulator's
(``kimi_serve.simulator.routes.build_app``: SGLang's ``OpenAIServingChat``, ``TemplateManager``, protocol models and
parsers, called through FastAPI's in-process test client; no socket). STAND-IN: the model. Its output is set per
scenario to the raw text a Kimi model emits in each fault (``kimi_serve.simulator.model.generate`` replaced), so
everything after the model, the parsing included, is SGLang's.

Scenarios, each non-streamed and streamed:
- ``unexpected_id``: a call whose id is ``call_8f2a`` (neither ``functions.NAME:N`` nor a bare counter);
- ``continuation``: a normal call whose arguments arrive in several deltas (the raw keys of each tool-call delta);
- ``bare_begin``: a call opened by ``<|tool_call_begin|>`` without ``<|tool_calls_section_begin|>``.

``thinking``: a plain question answered by the simulator's own scripted model (no stand-in output: it thinks unless
the prompt SGLang rendered ends in ``<think></think>``), with each thinking switch: Moonshot's
``thinking: {"type": "disabled"|"enabled"}`` (non-streamed and streamed), against ``reasoning_effort``, under an explicit
``chat_template_kwargs``, and ``{"type": "adaptive"}``.

Then verify's parser probes (``kimi_serve.verify.parser_faults.CASES``) through the app's ``POST
/parse_function_call`` (SGLang's native endpoint, the installed detector's non-streaming parse).
"""

from __future__ import annotations

import json
import os
import sys

SITE, REPO = sys.argv[1], sys.argv[2]
sys.path[:0] = [SITE, REPO]
os.environ.setdefault("KIMI_SERVE_SIM_STEP_SECONDS", "0")

import sglang  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from kimi_serve.simulator import engine, routes  # noqa: E402
from kimi_serve.simulator.args import resolve  # noqa: E402
from kimi_serve.simulator.tokenizer import load_tokenizer  # noqa: E402

ARGS = '{"city": "Paris", "unit": "celsius", "note": "' + "x" * 80 + '"}'
OUTPUTS = {
    "unexpected_id": "Call it.</think><|tool_calls_section_begin|><|tool_call_begin|>call_8f2a"
    f"<|tool_call_argument_begin|>{ARGS}<|tool_call_end|><|tool_calls_section_end|>",
    "continuation": "Call it.</think><|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    f"<|tool_call_argument_begin|>{ARGS}<|tool_call_end|><|tool_calls_section_end|>",
    "bare_begin": f"Call it.</think><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{ARGS}"
    "<|tool_call_end|>",
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string"}, "note": {"type": "string"}},
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}},
    },
]

current: dict = {"text": ""}
scripted_model = engine.scripted.generate  # the simulator's own scripted Kimi: reads thinking from the prompt
# the STAND-IN model's output for the scenario (None: the scripted model's own answer)
engine.scripted.generate = lambda turn: scripted_model(turn) if current["text"] is None else current["text"]

sim = resolve(["--model-path", "/models/Kimi-K2.5", "--served-model-name", "kimi-k2.5", "--tool-call-parser",
               "kimi_k2", "--reasoning-parser", "kimi_k2", "--port", "30000"])  # fmt: skip
client = TestClient(routes.build_app(sim, load_tokenizer(sim.tokenizer_dir), routes.ServerState()))
body = {"model": "kimi-k2.5", "messages": [{"role": "user", "content": "weather?"}], "tools": TOOLS}


def non_stream() -> dict:
    message = client.post("/v1/chat/completions", json=body).json()["choices"][0]
    calls = message["message"].get("tool_calls") or []
    return {
        "finish_reason": message["finish_reason"],
        "calls": [[c["id"], c["function"]["name"], c["function"]["arguments"]] for c in calls],
        "content": message["message"].get("content"),
    }


def stream() -> dict:
    deltas, names, finish, content = [], {}, None, ""
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as reply:
        for line in reply.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[6:]).get("choices") or []:
                delta = choice.get("delta") or {}
                content += delta.get("content") or ""
                finish = choice.get("finish_reason") or finish
                for tc in delta.get("tool_calls") or []:
                    deltas.append({"keys": sorted(tc), "function_keys": sorted(tc.get("function") or {})})
                    if (tc.get("function") or {}).get("name"):
                        names[tc["index"]] = tc["function"]["name"]
    return {"finish_reason": finish, "names": [names[i] for i in sorted(names)], "deltas": deltas, "content": content}


from kimi_serve.verify.parser_faults import CASES  # noqa: E402
from kimi_serve.verify.parser_faults import TOOLS as PROBE_TOOLS  # noqa: E402

result: dict = {"module": sglang.__file__}
# verify's own parser probes (kimi_serve/verify/parser_faults.py) through the app's POST /parse_function_call
result["parse_function_call"] = {
    code: (r.status_code, r.json())
    for code, text, _ in CASES
    for r in [
        client.post("/parse_function_call", json={"text": text, "tools": PROBE_TOOLS, "tool_call_parser": "kimi_k2"})
    ]
}
for scenario, text in OUTPUTS.items():
    current["text"] = text
    result[scenario] = {"non_stream": non_stream(), "stream": stream()}


def thinking(extra: dict, streamed: bool = False) -> dict:
    """A plain question with ``extra`` fields, answered by the scripted model: what came back as reasoning."""
    req = {"model": "kimi-k2.5", "messages": [{"role": "user", "content": "What is 2+2?"}], **extra}
    if not streamed:
        message = client.post("/v1/chat/completions", json=req).json()["choices"][0]["message"]
        return {"reasoning": message.get("reasoning_content"), "content": message.get("content")}
    reasoning, content = "", ""
    with client.stream("POST", "/v1/chat/completions", json={**req, "stream": True}) as reply:
        for line in reply.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for choice in json.loads(line[6:]).get("choices") or []:
                    reasoning += (choice.get("delta") or {}).get("reasoning_content") or ""
                    content += (choice.get("delta") or {}).get("content") or ""
    return {"reasoning": reasoning or None, "content": content}


# Thinking switches (the scripted model thinks unless the rendered prompt ends in <think></think>)
current["text"] = None
DISABLED, ENABLED = {"thinking": {"type": "disabled"}}, {"thinking": {"type": "enabled"}}
result["thinking"] = {
    "default": thinking({}),
    "moonshot_disabled": thinking(DISABLED),
    "moonshot_disabled_stream": thinking(DISABLED, streamed=True),
    "moonshot_enabled": thinking(ENABLED),
    "moonshot_disabled_over_effort": thinking({**DISABLED, "reasoning_effort": "high"}),
    "kwargs_win_over_moonshot": thinking({**DISABLED, "chat_template_kwargs": {"thinking": True}}),
    "kwargs_off": thinking({"chat_template_kwargs": {"thinking": False}}),
    "adaptive": thinking({"thinking": {"type": "adaptive"}}),
}
print(json.dumps(result))
