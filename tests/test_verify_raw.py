"""The raw-token path against the simulator (SGLang's own serving layer, real HTTP): `verify --suite raw` passes with
and without parsers, the lossless check passes and points at the difference when a stand-in layer alters the parsed
text, a /generate that strips special tokens fails with the fix, and SGLang's own clients (/v1/completions through
the openai SDK, sglang.bench_serving --backend sglang) run against it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import openai
import pytest
import requests
from raw_proxy import RawProxy
from sim_pool import SimulatorPool

from kimi_serve.simulator import launcher
from kimi_serve.verify import kimi_format as kf
from kimi_serve.verify import run_verify
from kimi_serve.verify.raw import RAW_PROBES, generate_body

KEY = "raw-test-key"
MODEL = "kimi-k2.5"
FLAGS = [
    "--model-path",
    "/models/Kimi-K2.5",
    "--served-model-name",
    MODEL,
    "--trust-remote-code",
    "--host",
    "127.0.0.1",
    "--skip-server-warmup",
]
PARSERS = ["--tool-call-parser", "kimi_k2", "--reasoning-parser", "kimi_k2"]


@pytest.fixture(scope="module")
def parsed(simulator_pool: SimulatorPool) -> launcher.Simulator:
    return simulator_pool.get([*FLAGS, *PARSERS], key=KEY, step="0")


@pytest.fixture(scope="module")
def bare(simulator_pool: SimulatorPool) -> launcher.Simulator:
    return simulator_pool.get(FLAGS, step="0")


def _by_name(report: object) -> dict[str, object]:
    return {p.probe: p for p in report.probes}  # type: ignore[attr-defined]


def test_raw_suite_passes_with_parsers(parsed: launcher.Simulator) -> None:
    report = run_verify(parsed.base_url, api_key=KEY, suite="raw", timeout=60)
    assert report.exit_code == 0, report.to_json()
    assert [(p.probe, p.mode) for p in report.probes] == [("raw-reasoning", "generate"), ("raw-tool", "generate")]


def test_raw_suite_passes_without_any_parser(bare: launcher.Simulator) -> None:
    report = run_verify(bare.base_url, suite="raw", timeout=60)
    assert report.exit_code == 0, report.to_json()
    assert report.server == {"tool_call_parser": None, "reasoning_parser": None}
    quick = run_verify(bare.base_url, suite="quick", timeout=60)
    assert quick.exit_code == 1  # the parsed path is broken on this server; the raw one is not


def test_generate_answer_is_kimis_raw_format(parsed: launcher.Simulator) -> None:
    body = generate_body(RAW_PROBES[1])
    data = requests.post(
        parsed.base_url + "/generate", json=body, timeout=30, headers={"Authorization": f"Bearer {KEY}"}
    ).json()
    ids, text = data["output_ids"], data["text"]
    assert ids.count(kf.THINK_END_ID) == 1 and text.count("</think>") == 1
    assert ids[-1] == kf.IM_END_ID and data["meta_info"]["finish_reason"] == {"type": "stop", "matched": 163586}
    assert data["meta_info"]["completion_tokens"] == len(ids) and data["meta_info"]["prompt_tokens"] > 100
    turn = kf.parse_raw(text)
    assert turn.reasoning and turn.calls and json.loads(turn.calls[0].arguments) == {"city": "Paris"}
    assert turn.calls[0].id == "functions.get_weather:0"
    # the default skip_special_tokens=true still keeps </think> (not a declared special token, as with Kimi's own)
    body["sampling_params"].pop("skip_special_tokens")
    plain = requests.post(
        parsed.base_url + "/generate", json=body, timeout=30, headers={"Authorization": f"Bearer {KEY}"}
    ).json()
    assert "</think>" in plain["text"]
    assert requests.post(parsed.base_url + "/generate", json=body, timeout=30).status_code == 401


def test_full_lossless_passes_and_names_the_reasoning_field(parsed: launcher.Simulator) -> None:
    report = run_verify(parsed.base_url, api_key=KEY, suite="full", timeout=120)
    assert report.exit_code == 0, report.to_json()
    probes = _by_name(report)
    assert {"raw-reasoning", "raw-tool", "lossless-reasoning", "lossless-tool"} <= probes.keys()
    detail = probes["lossless-reasoning"].detail  # type: ignore[attr-defined]
    assert "message.reasoning_content only" in detail and "model_extra['reasoning_content']" in detail
    as_json = [p for p in report.to_dict()["probes"] if p["probe"] == "lossless-reasoning"]
    assert [p.get("detail") for p in as_json] == [detail]  # the JSON report carries what the probe found out


def test_lossless_without_parsers_says_where_the_reasoning_is(bare: launcher.Simulator) -> None:
    report = run_verify(bare.base_url, suite="full", timeout=120)
    probes = _by_name(report)
    assert probes["lossless-reasoning"].passed and probes["lossless-tool"].passed  # type: ignore[attr-defined]
    assert "inside content, before </think>" in probes["lossless-reasoning"].detail  # type: ignore[attr-defined]


def test_a_parser_that_drops_whitespace_fails_lossless_at_the_argument(parsed: launcher.Simulator) -> None:
    with RawProxy(parsed.base_url, "compact-arguments") as proxy:
        report = run_verify(proxy.base_url, api_key=KEY, suite="full", timeout=120)
    probes = _by_name(report)
    finding = probes["lossless-tool"].findings[0]  # type: ignore[attr-defined]
    assert finding.code == "lossless_mismatch"
    assert "whitespace only" in finding.message
    assert '{"city": "Paris"}' in finding.message and '{"city":"Paris"}' in finding.message  # raw vs rebuilt
    assert "tokens identical on both paths" in finding.message
    assert probes["lossless-reasoning"].passed and probes["raw-tool"].passed  # type: ignore[attr-defined]


def test_a_lost_fragment_is_located(parsed: launcher.Simulator) -> None:
    with RawProxy(parsed.base_url, "strip-reasoning") as proxy:
        report = run_verify(proxy.base_url, api_key=KEY, suite="full", timeout=120)
    finding = _by_name(report)["lossless-reasoning"].findings[0]  # type: ignore[attr-defined]
    assert finding.code == "lossless_mismatch" and "character" in finding.message


def test_a_nondeterministic_server_is_named_not_blamed_on_the_parser(parsed: launcher.Simulator) -> None:
    with RawProxy(parsed.base_url, "perturb-generate") as proxy:
        report = run_verify(proxy.base_url, api_key=KEY, suite="full", timeout=120)
    finding = _by_name(report)["lossless-reasoning"].findings[0]  # type: ignore[attr-defined]
    assert finding.code == "lossless_nondeterministic"
    assert "from token 1" in finding.message and "--enable-deterministic-inference" in finding.fix


def test_a_generate_that_strips_special_tokens_fails_raw_with_the_fix(bare: launcher.Simulator) -> None:
    with RawProxy(bare.base_url, "strip-special") as proxy:
        report = run_verify(proxy.base_url, suite="raw", timeout=60)
    assert report.exit_code == 1
    codes = {f.code for p in report.probes for f in p.findings}
    assert "raw_special_stripped" in codes and "raw_no_tool_section" in codes
    stripped = next(f for p in report.probes for f in p.findings if f.code == "raw_special_stripped")
    assert "skip_special_tokens: false" in stripped.fix and "163607" in stripped.message


def test_completions_endpoint_via_the_openai_sdk(parsed: launcher.Simulator) -> None:
    client = openai.OpenAI(base_url=parsed.base_url + "/v1", api_key=KEY, max_retries=0, timeout=30)
    prompt = kf.render_prompt([{"role": "user", "content": "What is 17 * 23?"}])
    done = client.completions.create(model=MODEL, prompt=prompt, max_tokens=200, temperature=0)
    assert "</think>" in done.choices[0].text and done.choices[0].finish_reason == "stop"
    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(model=MODEL, prompt=prompt, max_tokens=200, stream=True)
        if c.choices
    )
    assert streamed == done.choices[0].text


def test_bench_serving_sglang_backend_runs(sglang_python: str, parsed: launcher.Simulator, tmp_path: Path) -> None:
    tok = tmp_path / "tokenizer"
    subprocess.run(
        [
            sglang_python,
            "-c",
            "import sys; from kimi_serve.simulator.tokenizer import build_standin; "
            "build_standin().save_pretrained(sys.argv[1])",
            str(tok),
        ],
        check=True,
        timeout=120,
        env=launcher.environment(),
    )
    shim = tmp_path / "shim"  # STAND-IN `datasets` package: bench_serving imports it; the random-ids set needs none
    shim.mkdir()
    (shim / "datasets.py").write_text("def load_dataset(*a, **k):\n    raise RuntimeError('stand-in datasets')\n")
    out = tmp_path / "bench.jsonl"
    env = {**os.environ, "PYTHONPATH": str(shim), "OPENAI_API_KEY": KEY, "HF_HUB_OFFLINE": "1"}
    run = subprocess.run(
        [
            sglang_python,
            "-m",
            "sglang.bench_serving",
            "--backend",
            "sglang",
            "--base-url",
            parsed.base_url,
            "--tokenizer",
            str(tok),
            "--model",
            MODEL,
            "--dataset-name",
            "random-ids",
            "--num-prompts",
            "4",
            "--random-input-len",
            "32",
            "--random-output-len",
            "16",
            "--random-range-ratio",
            "1",
            "--output-file",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    result = json.loads(out.read_text().splitlines()[-1])
    assert result["backend"] == "sglang" and result["completed"] == 4
    assert result["total_output_tokens"] == 64  # ignore_eos: exactly --random-output-len tokens each
