"""verify against the contract stand-in server (tests/contract_server.py): correct variants pass, every failure class
fails with its diagnosis and the documented exit code. Core (run_verify) and CLI (kimi_serve.cli.main) both."""

from __future__ import annotations

import json
import time

import pytest
from contract_server import CORRECT_MODES, ContractServer

from kimi_serve.cli import main
from kimi_serve.verify import run_verify
from kimi_serve.verify.report import VerifyReport

# its servers (or the code under test's port probes) bind loopback sockets: the listener tier
pytestmark = pytest.mark.usefixtures("loopback_port")

TIMEOUT = 20.0

# mode -> (suite, probe that must fail, mode of that probe or None for both, finding code, words in message + fix);
# the parsers left out are diagnosed on SGLang's own serving layer (tests/test_verify_agentic_sglang.py DIAGNOSED)
FAILURES = {
    "think-stripped": ("quick", "reasoning", None, "content_missing", "`</think>` stripped"),
    "reasoning-stripped-no-parser": ("quick", "reasoning", None, "reasoning_missing", "skip_special_tokens"),
    "reasoning-field": ("quick", "reasoning", None, "reasoning_field", "message.reasoning,"),
    "tool-in-reasoning": ("quick", "tool", None, "tool_call_in_reasoning", "<|tool_calls_section_begin|>"),
    "finish-stop-with-calls": ("quick", "tool", None, "finish_reason", 'finish_reason is "stop"'),
    "tool-calls-empty": ("quick", "tool", None, "tool_calls_missing", "message.tool_calls is empty"),
    "bad-json-args": ("quick", "tool", None, "arguments_not_json", '\'{"city": "Paris"\''),
    "schema-violation": ("quick", "tool", None, "arguments_schema", "'city' is a required property"),
    "unknown-function": ("quick", "tool", None, "unknown_function", '"weather_lookup"'),
    "missing-id": ("quick", "tool", None, "tool_call_id", "has no id"),
    "special-token-leak": ("quick", "reasoning", None, "special_token_leak", "<|im_end|>"),
    "stream-no-finish": ("quick", "reasoning", "stream", "stream_no_finish_reason", "finish_reason"),
    "http-500": ("quick", "tool", None, "http_5xx", "HTTP 500"),
    "non-json": ("quick", "tool", "non-stream", "non_json_body", "502 Bad Gateway"),
    "think-vl-markers": ("quick", "reasoning", None, "think_in_content", "◁think▷"),
    "think-k3-markers": ("quick", "tool", None, "think_in_content", "<|open|>think<|sep|>"),
    "reasoning-echo": ("quick", "reasoning", None, "reasoning_in_content", "merges reasoning_content into content"),
    "sse-ids-keepalive": ("quick", "tool", "stream", "stream_sse_field", "keep-alive (`: ...` then a blank line)"),
    "sse-retry-block": ("quick", "reasoning", "stream", "stream_sse_field", "`retry:` directive"),
    "sse-ping-events": ("quick", "tool", "stream", "stream_sse_field", "`event: ping` block"),
    # quick's agentic pair (the start gate; before, only full caught them): Moonshot's rule refusing a replay without
    # reasoning_content, and a stream that loses the second of two calls (the non-stream answer keeps both)
    "reasoning-required": ("quick", "loop-no-reasoning", "non-stream", "http_error", "reasoning_content is missing"),
    "stream-second-call-lost": ("quick", "parallel", "stream", "parallel_calls", "expected 2"),
    "instant-ignored": ("full", "instant", None, "instant_reasoning", "chat_template_kwargs.thinking"),
    "duplicate-ids": ("full", "parallel", None, "duplicate_ids", "functions.get_weather:0"),
    "single-call": ("full", "parallel", None, "parallel_calls", "expected 2"),
    "large-arg-cut": ("full", "large-argument", "stream", "argument_corrupt", "fragments were lost"),
    "second-turn-empty": ("full", "tool-result", None, "content_missing", "functions.NAME:IDX"),
}


RAW_PATH = {
    ("raw-reasoning", "generate"),
    ("raw-tool", "generate"),
    ("lossless-reasoning", "chat+generate"),
    ("lossless-tool", "chat+generate"),
}  # what full adds on the raw path (verify/raw_suite.py)


AGENTIC_ONE_MODE = {
    ("instant-effort", "non-stream"),
    ("instant-moonshot", "non-stream"),
    ("strict-parallel", "stream"),
    ("loop-parts", "stream"),
    ("loop-no-reasoning", "non-stream"),
    ("load", "stream"),
    ("budget", "non-stream"),
}  # what full adds in one mode (verify/agentic.py, load.py, budget.py)


def _failed(report: VerifyReport, probe: str, mode: str | None) -> list:
    return [p for p in report.probes if p.probe == probe and (mode is None or p.mode == mode) and not p.passed]


@pytest.mark.parametrize("mode", CORRECT_MODES)
def test_correct_variants_pass_the_full_suite(mode: str) -> None:
    with ContractServer(mode) as srv:
        report = run_verify(srv.host, suite="full", timeout=TIMEOUT)
    if mode == "call-ids":  # call_<hex> ids keep the contract but lose the raw functions.NAME:N ids: not lossless
        failed = [p for p in report.probes if not p.passed]
        assert [(p.probe, p.findings[0].code) for p in failed] == [("lossless-tool", "lossless_mismatch")]
        assert "functions.get_weather:0" in failed[0].findings[0].message
        return
    assert [p.to_dict()["findings"] for p in report.probes if not p.passed] == []
    assert report.exit_code == 0 and report.status == "pass"
    assert {(p.probe, p.mode) for p in report.probes} == {
        (n, m)
        for n in ("tool", "reasoning", "instant", "parallel", "tool-result", "strict-tool", "loop")
        for m in ("non-stream", "stream")
    } | {("large-argument", "stream"), ("accounting", "non-stream")} | RAW_PATH | AGENTIC_ONE_MODE
    assert report.model == "kimi-k2.5"
    assert report.server == {"tool_call_parser": "kimi_k2", "reasoning_parser": "kimi_k2"}


@pytest.mark.parametrize("mode", sorted(FAILURES))
def test_each_failure_class_is_diagnosed(mode: str) -> None:
    suite, probe, probe_mode, code, words = FAILURES[mode]
    with ContractServer(mode) as srv:
        report = run_verify(srv.host, suite=suite, timeout=TIMEOUT)
    assert report.exit_code == 1 and report.status == "fail"
    failed = _failed(report, probe, probe_mode)
    assert failed, f"{probe} did not fail: {report.to_json()}"
    for result in failed:
        finding = next((f for f in result.findings if f.code == code), None)
        assert finding is not None, result.to_dict()
        assert words in finding.message + finding.fix
        assert finding.fix


def test_model_noise_gets_one_more_try_and_server_faults_do_not() -> None:
    with ContractServer("flaky-model") as srv:
        flaky = run_verify(srv.host, suite="full", timeout=TIMEOUT)
    assert flaky.exit_code == 0
    assert {(p.probe, p.attempts) for p in flaky.probes} == {
        ("tool", 2),
        ("reasoning", 1),
        ("instant", 1),
        ("parallel", 2),
        ("tool-result", 1),
        ("large-argument", 2),
        ("instant-effort", 1),
        ("instant-moonshot", 1),
        ("strict-tool", 2),
        ("strict-parallel", 2),
        ("loop", 2),
        ("loop-parts", 2),
        ("loop-no-reasoning", 2),
        ("load", 2),
        ("budget", 1),
        ("accounting", 1),
    } | {(name, 1) for name, _ in RAW_PATH}
    with ContractServer("single-call") as srv:
        single = run_verify(srv.host, suite="full", timeout=TIMEOUT)
    assert [p.attempts for p in single.probes if p.probe == "parallel"] == [2, 2]
    with ContractServer("no-tool-parser") as srv:
        raw = run_verify(srv.host, timeout=TIMEOUT)
        assert len(srv.requests) == 13  # quick's 12 probes and the accounting; the loops stop at their first turn
    assert all(p.attempts == 1 for p in raw.probes)


def test_template_kwargs_only_where_thinking_is_off() -> None:
    with ContractServer() as srv:
        run_verify(srv.host, suite="quick", timeout=TIMEOUT)
        assert len(srv.requests) == 15  # 12 probes, the two loops' two turns each, the accounting
        with_kwargs = [b for b in srv.requests if "chat_template_kwargs" in b]
        assert len(with_kwargs) == 2  # instant + the budget
        srv.requests.clear()
        run_verify(srv.host, suite="full", timeout=TIMEOUT)
    with_kwargs = [b for b in srv.requests if "chat_template_kwargs" in b]
    assert len(with_kwargs) == 4  # instant x 2 modes + the large argument + the budget
    assert all(b["chat_template_kwargs"] == {"thinking": False} for b in with_kwargs)
    sized = [b for b in srv.requests if "max_completion_tokens" in b]
    assert [b["max_completion_tokens"] for b in sized] == [262144 - 64 - 1024]
    assert all(b["max_tokens"] >= 4096 and b["temperature"] <= 0.7 for b in srv.requests if b not in sized)


def test_stalled_stream_fails_within_timeout() -> None:
    with ContractServer("stream-stall") as srv:
        report = run_verify(srv.host, timeout=2.0)
    assert report.exit_code == 1
    stalled = [p for p in report.probes if p.mode == "stream"]
    assert stalled and all([f.code for f in p.findings] == ["timeout"] for p in stalled)  # no noise from a cut text
    assert "stalled" in stalled[0].findings[0].message
    assert all(p.passed for p in report.probes if p.mode == "non-stream")
    assert report.elapsed_s < 2.0 + 2.0  # the deadline plus slack, never the server's 120 s stall


def test_a_slow_stream_that_keeps_sending_is_slow_not_hung() -> None:
    """Bytes every 0.25 s, never a pause near the stall limit (1.2 s, half the timeout; a loaded machine's late
    wake-ups stay far from it), the answer still arriving at the deadline: "slow", not "server hangs"."""
    with ContractServer("slow-stream") as srv:
        report = run_verify(srv.host, timeout=2.4)
    slow = [p for p in report.probes if p.mode == "stream"]
    assert report.exit_code == 1 and slow
    for p in slow:
        assert [f.code for f in p.findings] == ["too_slow"], p.findings
        assert "slow, not hung" in p.findings[0].message and "1.2s stall limit" in p.findings[0].message
        assert "hang" not in p.findings[0].fix


def test_a_stall_is_no_bytes_for_the_stated_time() -> None:
    with ContractServer("stream-stall") as srv:
        report = run_verify(srv.host, timeout=4.0)
    stalled = [p for p in report.probes if p.mode == "stream"]
    assert all(p.findings[0].code == "timeout" and "no bytes for 2s" in p.findings[0].message for p in stalled)
    # stopped at the stall limit (2 s), not at the 4 s deadline
    assert all(p.latency_s < 3.5 for p in stalled), [p.latency_s for p in stalled]


def test_hung_server_fails_within_timeout() -> None:
    """The whole run ends by the deadline plus the join's grace: the draft's reads after the probes (/server_info,
    /metrics) included, and counted in elapsed_s."""
    with ContractServer("hang") as srv:
        started = time.monotonic()
        report = run_verify(srv.host, timeout=2.0)
        took = time.monotonic() - started
    assert report.exit_code == 1
    assert all(p.findings[0].code == "timeout" and "--timeout 2s" in p.findings[0].message for p in report.probes)
    assert report.elapsed_s < 2.0 + 2.0
    assert took < 2.0 + 2.0 + 0.5 and took - report.elapsed_s < 0.5, (took, report.elapsed_s)


def test_unknown_model_names_the_served_models() -> None:
    with ContractServer(served_model="kimi-k2.5-int4") as srv:
        report = run_verify(srv.host, model="kimi-k2", timeout=TIMEOUT)
    assert report.exit_code == 1
    finding = report.probes[0].findings[0]
    assert finding.code == "http_404_model"
    assert "'kimi-k2' is not served (served: kimi-k2.5-int4)" in finding.message
    assert "--model" in finding.fix


def test_api_key_missing_or_wrong_gives_401_diagnosis() -> None:
    with ContractServer(api_key="s3cret-key") as srv:
        missing = run_verify(srv.host, timeout=TIMEOUT)
        wrong = run_verify(srv.host, api_key="nope", timeout=TIMEOUT)
        right = run_verify(srv.host, api_key="s3cret-key", timeout=TIMEOUT)
    assert missing.exit_code == 1 and missing.error is not None and missing.error.code == "http_401"
    assert "none was sent" in missing.error.message and "--api-key" in missing.error.fix
    assert "KIMI_SERVE_API_KEY" in missing.error.fix
    assert wrong.exit_code == 1 and "rejected" in wrong.error.message
    assert right.exit_code == 0
    assert "s3cret-key" not in right.to_json() and "nope" not in wrong.to_json()


# --- through the command line ---------------------------------------------------------------------------------------


def test_cli_json_report_is_stable(capsys) -> None:
    with ContractServer("no-tool-parser") as srv:
        code = main(["verify", "--host", srv.host, "--json", "--timeout", "20"])
    out = capsys.readouterr().out
    report = json.loads(out)
    assert code == 1
    assert list(report) == [
        "kind",
        "version",
        "ok",
        "exit_code",
        "findings",
        "status",
        "target",
        "model",
        "suite",
        "elapsed_s",
        "key_source",
        "readiness",
        "server",
        "error",
        "probes",
        "warnings",
        "checks",
        "listeners",
        "budget",
        "thinking_off",
        "concurrency",
        "acceptance",
    ]
    assert report["kind"] == "kimi-serve-verify" and report["version"] == 1
    assert report["status"] == "fail" and report["exit_code"] == 1
    assert report["target"] == f"http://{srv.host}"
    assert report["readiness"]["ready"] is True and report["readiness"]["phase"] == "ready"
    assert report["server"] == {"tool_call_parser": None, "reasoning_parser": "kimi_k2"}
    tool = [p for p in report["probes"] if p["probe"] == "tool"]
    assert [p["status"] for p in tool] == ["fail", "fail"]
    assert set(tool[0]) == {"probe", "mode", "status", "latency_s", "attempts", "findings", "warnings"}
    assert tool[0]["attempts"] == 1
    assert tool[0]["findings"][0]["code"] == "raw_tool_tokens"
    assert set(tool[0]["findings"][0]) == {"code", "message", "fix"}
    assert all(p["status"] == "pass" for p in report["probes"] if p["probe"] == "reasoning")


def test_cli_plain_lines_when_not_a_terminal(capsys) -> None:
    with ContractServer("bad-json-args") as srv:
        code = main(["verify", "--host", f"http://{srv.host}/v1", "--timeout", "20"])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL tool non-stream" in out and "arguments are not JSON" in out and "PASS reasoning stream" in out
    # tool x 2, strict, loop; the stand-in's unpatched stream shape and Moonshot's ignored dialect warn
    assert out.strip().splitlines()[-1] == "verify: contract VIOLATED: 6 failed, 2 warnings, 7 passed"


def test_cli_pass_exit_0_and_key_from_env(capsys, monkeypatch) -> None:
    monkeypatch.setenv("KIMI_SERVE_API_KEY", "env-key-123")
    with ContractServer(api_key="env-key-123") as srv:
        code = main(["verify", "--host", srv.host.replace("127.0.0.1", "0.0.0.0"), "--timeout", "20"])
    captured = capsys.readouterr()
    assert code == 0, captured.out
    assert "verify: contract holds: 2 warnings, 13 passed (" in captured.out
    assert "env-key-123" not in captured.out + captured.err


def test_cli_key_file(capsys, tmp_path) -> None:
    key_file = tmp_path / "api-key.yaml"
    key_file.write_text("api-key: file-key-9\n")
    key_file.chmod(0o600)
    with ContractServer(api_key="file-key-9") as srv:
        ok = main(["verify", "--host", srv.host, "--api-key-file", str(key_file), "--timeout", "20"])
        key_file.chmod(0o644)
        refused = main(["verify", "--host", srv.host, "--api-key-file", str(key_file), "--timeout", "20"])
    captured = capsys.readouterr()
    assert ok == 0 and refused == 2
    assert f"fix: chmod 600 {key_file}" in captured.err
    assert len(captured.err.strip().splitlines()) == 1
    assert "file-key-9" not in captured.out + captured.err


def test_cli_401_names_the_option(capsys) -> None:
    with ContractServer(api_key="k") as srv:
        code = main(["verify", "--host", srv.host, "--timeout", "20"])
    out = capsys.readouterr().out
    assert code == 1
    assert "HTTP 401" in out and "--api-key" in out and "Traceback" not in out


def test_cli_bad_host_is_usage(capsys) -> None:
    assert main(["verify", "--host", "ftp://x:1"]) == 2
    assert "unsupported scheme" in capsys.readouterr().err


def test_a_clean_end_without_done_passes_with_a_warning() -> None:
    """The openai SDK reads a stream that ends after its finish_reason without [DONE]: so does verify (it warns)."""
    with ContractServer("stream-no-done") as srv:
        report = run_verify(srv.host, timeout=TIMEOUT)
    assert report.exit_code == 0, [p.to_dict() for p in report.probes]
    streamed = [p for p in report.probes if p.mode == "stream"]
    assert streamed and all("stream_no_done" in {w.code for w in p.warnings} for p in streamed)
    assert {w.code for p in streamed for w in p.warnings} == {"stream_no_done", "stream_null_tool_fields"}


SSE_MODES = ("sse-event-ids", "sse-keepalive", "sse-named-events", "sse-crlf", "sse-ids-keepalive", "sse-retry-block")


def _sdk_streams_it(host: str, tools: bool) -> bool:
    """The official openai SDK's stream helper reads the turn over loopback (no exception, a reply in it)."""
    import openai

    client = openai.OpenAI(api_key="none", base_url=f"http://{host}/v1", max_retries=0, timeout=TIMEOUT)
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    try:
        with client.chat.completions.stream(
            model="kimi-k2.5", messages=[{"role": "user", "content": "17 x 23?"}], tools=[weather] if tools else []
        ) as events:
            for _event in events:
                pass
            message = events.get_final_completion().choices[0].message
    except Exception:  # noqa: BLE001 - any exception is the SDK failing to read the stream
        return False
    return bool(message.tool_calls if tools else message.content)


@pytest.mark.parametrize("mode", SSE_MODES)
def test_sse_framings_fail_in_quick_exactly_where_the_sdk_fails(mode: str) -> None:
    pytest.importorskip("openai")
    with ContractServer(mode) as srv:
        sdk = {"tool": _sdk_streams_it(srv.host, True), "reasoning": _sdk_streams_it(srv.host, False)}
        report = run_verify(srv.host, suite="quick", timeout=TIMEOUT)
    streamed = {p.probe: p for p in report.probes if p.mode == "stream" and p.probe in sdk}
    assert {name: p.passed for name, p in streamed.items()} == sdk, [p.to_dict() for p in streamed.values()]
    assert sdk["tool"] == (mode in CORRECT_MODES)
    assert all(p.findings[0].code == "stream_sse_field" for p in streamed.values() if not p.passed)
