"""Drive SGLang 0.5.23's own OpenAI serving layer and kimi_k2 parsers into each parse failure of real traffic that it
logs, and print what it logged for each; one JSON object. Then verify's own parser probes (POST /parse_function_call,
kimi_serve/verify/parser_faults.py), each under its finding code, whose lines the counters must leave out.

Run with the CPU SGLang interpreter: ``python traffic_log_probe.py REPO_DIR``. The log is set up by SGLang's own
``configure_logger`` (the format its server writes to the journal), its stream captured per scenario. The app is the
simulator's (``kimi_serve.simulator.routes.build_app``: SGLang's ``OpenAIServingChat``, protocol models and parsers,
through FastAPI's in-process test client; no socket). STAND-IN: the model. Its output is set per scenario to the raw
text that makes the parser fail (``kimi_serve.simulator.engine.scripted.generate`` replaced), so everything after the
model, the parsing and its log lines included, is SGLang's.
"""

from __future__ import annotations

import io
import json
import logging
import os
import sys
from types import SimpleNamespace

sys.path.insert(0, sys.argv[1])
os.environ.setdefault("KIMI_SERVE_SIM_STEP_SECONDS", "0")

import sglang
from fastapi.testclient import TestClient
from sglang.srt.utils.common import configure_logger

from kimi_serve.simulator import engine, routes
from kimi_serve.simulator.args import resolve
from kimi_serve.simulator.tokenizer import load_tokenizer
from kimi_serve.verify.parser_faults import CASES, PATH, request_body

ARGS = '{"city": "Paris"}'
BEGIN, ARG, END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
SECTION, SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"


def call(call_id: str, args: str = ARGS) -> str:
    return f"{BEGIN}{call_id}{ARG}{args}{END}"


# scenario -> (reasoning parser, extra request fields, stream, the model's raw output)
SCENARIOS: dict[str, tuple[str, dict, bool, str]] = {
    "unexpected_id": ("kimi_k2", {}, False, f"Call it.</think>{SECTION}{call('call_8f2a')}{SECTION_END}"),
    "unexpected_id_stream": ("kimi_k2", {}, True, f"Call it.</think>{SECTION}{call('call_8f2a')}{SECTION_END}"),
    "unclosed_call_stream": (
        "kimi_k2",
        {},
        True,
        f"Call it.</think>{SECTION}{BEGIN}functions.get_weather:0{call('functions.get_time:1')}{SECTION_END}",
    ),
    "detector_error_stream": ("kimi_k2", {}, True, f"Call it.</think>{SECTION}{call('3', '[1]')}{SECTION_END}"),
    "reasoning_error": ("k2_horizon", {"chat_template_kwargs": {"thinking": False}}, False, "Sunny."),
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}},
    },
]

current = {"text": ""}
engine.scripted.generate = lambda turn: current["text"]  # the STAND-IN model's output for the scenario


def client(reasoning_parser: str) -> TestClient:
    sim = resolve(["--model-path", "/models/Kimi-K2.5", "--served-model-name", "kimi-k2.5", "--tool-call-parser",
                   "kimi_k2", "--reasoning-parser", reasoning_parser, "--port", "30000"])  # fmt: skip
    return TestClient(routes.build_app(sim, load_tokenizer(sim.tokenizer_dir), routes.ServerState()))


clients = {parser: client(parser) for parser in ("kimi_k2", "k2_horizon")}
configure_logger(SimpleNamespace(log_level="info"))  # after the apps: SGLang's own handler and format
captured = io.StringIO()
for handler in logging.getLogger().handlers:
    if isinstance(handler, logging.StreamHandler):
        handler.setStream(captured)


result: dict = {"module": sglang.__file__, "logs": {}}
for name, (reasoning_parser, extra, stream, text) in SCENARIOS.items():
    app = clients[reasoning_parser]
    current["text"] = text
    captured.seek(0)
    captured.truncate()
    body = {"model": "kimi-k2.5", "messages": [{"role": "user", "content": "weather?"}], "tools": TOOLS, **extra}
    if stream:
        with app.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as reply:
            status = reply.status_code
            for _ in reply.iter_lines():
                pass
    else:
        status = app.post("/v1/chat/completions", json=body).status_code
    result["logs"][name] = {"status": status, "lines": captured.getvalue().splitlines()}
for code, text, _ in CASES:  # the check's own probes, as verify sends them
    captured.seek(0)
    captured.truncate()
    status = clients["kimi_k2"].post(PATH, json=request_body(text)).status_code
    result["logs"][code] = {"status": status, "lines": captured.getvalue().splitlines()}
print(json.dumps(result), flush=True)
# Skip the interpreter's teardown: with the test clients' threads and torch loaded it can abort ("terminate called
# without an active exception", SIGABRT) after the answer is out, which a busy machine made happen in a full run.
os._exit(0)
