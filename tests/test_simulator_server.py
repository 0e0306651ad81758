"""The simulator as a real HTTP server (SGLang's own serving layer in the CPU SGLang venv), driven by the official
`openai` client over loopback. Two simulator processes for the whole module: one with the kimi_k2 parsers and an
API key, one without parsers (the seeds' production bug)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import openai
import pytest
from sim_pool import SGLangSession, venv_redacts_server_info

from kimi_serve.core.settings import SIM_STEP_ENV
from kimi_serve.simulator import launcher

KEY = "sim-test-key"
REDACTED = "<redacted>"
MODEL = "kimi-k2.5"
WARMUP = 3.0
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
        },
    },
}
GLOB = {
    "type": "function",
    "function": {
        "name": "glob",
        "description": "Find files matching a glob pattern",
        "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}}, "required": ["pattern"]},
    },
}
PROD_FLAGS = [
    "--model-path",
    "/models/Kimi-K2.5",
    "--served-model-name",
    MODEL,
    "--trust-remote-code",
    "--tp-size",
    "8",
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "/models/kimi-k2.5-eagle3-mla",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
    "--host",
    "127.0.0.1",
]


def _get(url: str, key: str | None = None) -> int:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _start(
    python: str, tmp: Path, flags: list[str], warmup: float
) -> tuple[launcher.Simulator, list[tuple[float, int]]]:
    """Start a simulator and record the /health answers from the moment the port opens until it is ready."""
    port = launcher.free_port()
    env = launcher.environment(warmup=warmup)
    env[SIM_STEP_ENV] = "0.002"
    sim = launcher.Simulator.start(
        launcher.command(python, [*flags, "--port", str(port)]),
        env,
        f"http://127.0.0.1:{port}",
        tmp / "simulator.log",
    )
    seen: list[tuple[float, int]] = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert sim.server.proc.poll() is None, sim.log_tail()
        try:
            code = _get(sim.base_url + "/health")
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
            continue
        seen.append((time.monotonic(), code))
        if code == 200:
            return sim, seen
        time.sleep(0.2)
    sim.stop()
    raise AssertionError(f"simulator not ready: {sim.log_tail()}")


@pytest.fixture(scope="module")
def served(
    sglang_session: SGLangSession, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[launcher.Simulator, list[tuple[float, int]]]]:
    """Its own server (not the pool's): the test reads its warm-up from the first answer on."""
    tmp = tmp_path_factory.mktemp("sim-parsers")
    secrets = tmp / "secrets.yaml"
    secrets.write_text(f"api-key: {KEY}\n")
    sim, seen = _start(
        sglang_session.python,
        tmp,
        [*PROD_FLAGS, "--tool-call-parser", "kimi_k2", "--reasoning-parser", "kimi_k2", "--config", str(secrets)],
        WARMUP,
    )
    yield sim, seen
    sim.stop()


@pytest.fixture(scope="module")
def raw_server(sglang_session: SGLangSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[launcher.Simulator]:
    """Its own server: test_sigterm_exits_cleanly stops it."""
    sim, _ = _start(sglang_session.python, tmp_path_factory.mktemp("sim-raw"), PROD_FLAGS, 0.0)
    yield sim
    sim.stop()


@pytest.fixture(scope="module")
def client(served: tuple[launcher.Simulator, list]) -> openai.OpenAI:
    return openai.OpenAI(base_url=served[0].base_url + "/v1", api_key=KEY, max_retries=0, timeout=60)


def test_health_and_ready_503_during_warmup_then_200(served: tuple[launcher.Simulator, list]) -> None:
    sim, seen = served
    codes = [code for _, code in seen]
    assert codes[0] == 503 and codes[-1] == 200 and set(codes) == {503, 200}
    first_503 = seen[0][0]
    first_200 = next(t for t, c in seen if c == 200)
    assert first_200 - first_503 >= WARMUP * 0.5  # the warmup window held 503
    for path in ("/health", "/health_generate", "/ready"):
        assert _get(sim.base_url + path) == 200  # exempt from the API key, like SGLang's


def test_api_key_enforced_where_sglang_enforces_it(served: tuple[launcher.Simulator, list]) -> None:
    sim, _ = served
    for path in ("/v1/models", "/model_info", "/server_info"):
        assert _get(sim.base_url + path) == 401
        assert _get(sim.base_url + path, "wrong") == 401
        assert _get(sim.base_url + path, KEY) == 200
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=sim.base_url + "/v1", api_key="wrong", max_retries=0).models.list()


def test_model_endpoints_report_the_argv(
    served: tuple[launcher.Simulator, list], client: openai.OpenAI, sglang_python: str
) -> None:
    sim, _ = served
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    req = urllib.request.Request(sim.base_url + "/model_info", headers={"Authorization": f"Bearer {KEY}"})
    info = json.load(urllib.request.urlopen(req, timeout=5))
    assert info["model_path"] == "/models/Kimi-K2.5" and info["served_model_name"] == MODEL
    assert (info["tool_call_parser"], info["reasoning_parser"]) == ("kimi_k2", "kimi_k2")
    req = urllib.request.Request(sim.base_url + "/server_info", headers={"Authorization": f"Bearer {KEY}"})
    server = json.load(urllib.request.urlopen(req, timeout=5))
    assert server["speculative_num_draft_tokens"] == 4 and server["attention_backend"] == "triton"  # SM120 resolution
    # SGLang's own /server_info body: the key in clear text unless that SGLang carries patch 0007 (see below).
    assert server["api_key"] == (REDACTED if _venv_redacts_server_info(sglang_python) else KEY)


def _venv_redacts_server_info(python: str) -> bool:
    """Whether the CPU venv's own sglang carries the /server_info redaction (kimi-serve patches status)."""
    return venv_redacts_server_info(python)


def test_verify_fails_when_the_served_sglang_leaks_the_key(
    served: tuple[launcher.Simulator, list], sglang_python: str
) -> None:
    """The simulator answers /server_info as the SGLang it runs on does, so verify's verdict predicts the real one:
    a FAIL naming patch 0007 on an unpatched engine, a pass on the patched one scripts/build-cpu-venv.sh builds."""
    from kimi_serve.verify import run_verify

    report = run_verify(served[0].base_url, api_key=KEY, suite="quick", timeout=60)
    assert all(p.passed for p in report.probes), report.to_json()
    leaks = [c for c in report.checks if c.code == "server_info_leaks_key"]
    if _venv_redacts_server_info(sglang_python):
        assert leaks == [] and report.exit_code == 0, report.to_json()
    else:
        assert [c.status for c in leaks] == ["fail"] and "0007" in leaks[0].fix and report.exit_code == 1
    assert report.warnings == [] and KEY not in report.to_json()


def test_tool_call_structured_non_stream(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model=MODEL, tools=[GLOB, WEATHER], messages=[{"role": "user", "content": "What's the weather in Paris?"}]
    )
    choice = choice0 = r.choices[0]
    assert choice0.finish_reason == "tool_calls"
    assert "<|" not in (choice.message.content or "")
    (call,) = choice.message.tool_calls
    assert call.id == "functions.get_weather:0" and call.function.name == "get_weather"
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, WEATHER["function"]["parameters"])
    assert args["city"] == "Paris"
    assert choice.message.model_extra["reasoning_content"]
    assert r.usage.completion_tokens > 0 and r.usage.prompt_tokens > 0


def test_tool_calls_structured_stream(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        tools=[WEATHER],
        stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Get the weather for two cities: Paris and London"}],
    )
    reasoning, content, args, names, finish, usage, chunks = "", "", {}, {}, None, None, 0
    for chunk in stream:
        chunks += 1
        usage = chunk.usage or usage
        for ch in chunk.choices:
            reasoning += ch.delta.model_extra.get("reasoning_content") or ""
            content += ch.delta.content or ""
            for tc in ch.delta.tool_calls or []:
                names[tc.index] = names.get(tc.index) or (tc.function.name if tc.function else None)
                args[tc.index] = args.get(tc.index, "") + ((tc.function.arguments or "") if tc.function else "")
            finish = ch.finish_reason or finish
    assert finish == "tool_calls" and reasoning and "<|" not in content
    assert names == {0: "get_weather", 1: "get_weather"}
    assert [json.loads(args[i])["city"] for i in (0, 1)] == ["Paris", "London"]
    assert chunks > 5 and usage is not None and usage.completion_tokens > 0


def test_reasoning_then_answer_and_thinking_off(client: openai.OpenAI) -> None:
    ask = [{"role": "user", "content": "What is 2+2?"}]
    on = client.chat.completions.create(model=MODEL, messages=ask).choices[0]
    assert on.message.model_extra["reasoning_content"] and on.message.content and "</think>" not in on.message.content
    assert on.finish_reason == "stop" and on.model_extra["matched_stop"] == 163586
    off = client.chat.completions.create(
        model=MODEL, messages=ask, extra_body={"chat_template_kwargs": {"thinking": False}}
    ).choices[0]
    assert off.message.model_extra.get("reasoning_content") is None and off.message.content


def test_streamed_reasoning_arrives_in_pieces(client: openai.OpenAI) -> None:
    pieces = [
        c.choices[0].delta.model_extra.get("reasoning_content")
        for c in client.chat.completions.create(
            model=MODEL, stream=True, messages=[{"role": "user", "content": "Explain DNS briefly"}]
        )
        if c.choices
    ]
    assert len([p for p in pieces if p]) > 3


def test_max_tokens_gives_finish_length(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "Hi there"}])
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 5


def test_without_parsers_raw_tokens_and_think_tag_in_content(raw_server: launcher.Simulator) -> None:
    c = openai.OpenAI(base_url=raw_server.base_url + "/v1", api_key="unused", max_retries=0, timeout=60)
    r = c.chat.completions.create(
        model=MODEL, tools=[GLOB], messages=[{"role": "user", "content": 'List the files matching "*"'}]
    ).choices[0]
    assert not r.message.tool_calls and r.finish_reason == "stop"
    assert (
        "</think><|tool_calls_section_begin|><|tool_call_begin|>functions.glob:0<|tool_call_argument_begin|>"
        in r.message.content
        and r.message.content.endswith("<|tool_call_end|><|tool_calls_section_end|>")
    )
    streamed = "".join(
        ch.choices[0].delta.content or ""
        for ch in c.chat.completions.create(
            model=MODEL, stream=True, messages=[{"role": "user", "content": "What is 2+2?"}]
        )
        if ch.choices
    )
    assert "</think>" in streamed and r.message.model_extra.get("reasoning_content") is None


def test_sigterm_exits_cleanly(raw_server: launcher.Simulator) -> None:
    assert raw_server.stop() == 0
    assert "Shutting down" in raw_server.log_path.read_text()


def test_simulate_cli_raw_dry_run_uses_the_sglang_python(sglang_python: str) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from kimi_serve.cli import entry; entry()",
            "simulate",
            "--dry-run",
            "--raw",
            "--",
            "--model-path",
            "/models/Kimi-K2.5",
            "--port",
            "30123",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "KIMI_SERVE_SGLANG_PYTHON": sglang_python},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [
        sglang_python,
        "-P",  # nothing from the working directory is imported (core/proc.py python_argv)
        "-m",
        "kimi_serve.simulator",
        "--model-path",
        "/models/Kimi-K2.5",
        "--port",
        "30123",
    ]


def test_sglang_own_bytes_read_the_same_by_the_openai_sdk_and_verify(served: tuple[launcher.Simulator, list]) -> None:
    """The corpus's SGLang shape, checked on SGLang's real serving layer: both readers pass and agree field by field."""
    import requests
    from sdk_corpus import sdk_final_completion

    from kimi_serve.verify.answer import answer_from_json
    from kimi_serve.verify.exchange import judge
    from kimi_serve.verify.probes import REASONING, TOOL
    from kimi_serve.verify.stream import answer_from_sse

    for probe in (TOOL, REASONING):
        for stream in (True, False):
            body = requests.post(
                served[0].base_url + "/v1/chat/completions",
                json=probe.body(MODEL, stream),
                headers={"Authorization": f"Bearer {KEY}"},
                timeout=60,
            ).content
            answer = answer_from_sse(body) if stream else answer_from_json(json.loads(body))
            failures, warnings = judge(probe, answer, {})
            # the venv's SGLang without the Kimi patch set sends "id": null in argument deltas: a warning, no failure
            unpatched = stream and probe is TOOL and b'"id":null' in body
            assert failures == () and [w.code for w in warnings] == ["stream_null_tool_fields"] * unpatched, (
                probe.name,
                stream,
            )
            choice = sdk_final_completion(body, stream=stream).choices[0]
            message = choice.message
            assert (message.content or "", getattr(message, "reasoning_content", None), choice.finish_reason) == (
                answer.content or "",
                answer.reasoning,
                answer.finish_reason,
            )
            assert [(c.id, c.type, c.function.name, c.function.arguments) for c in message.tool_calls or []] == [
                (c.id, c.type, c.name, c.arguments) for c in answer.tool_calls
            ]
