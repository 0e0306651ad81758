"""Which API key verify sends: a named key file beats a stale $KIMI_SERVE_API_KEY (the file is what the server reads
its key from), and every report says which source was used, never the key itself."""

from __future__ import annotations

import json

import pytest
from contract_server import ContractServer

from kimi_serve.service.verifier import contract_verifier
from kimi_serve.verify import run_verify
from kimi_serve.verify.target import API_KEY_ENV, resolve_key

# its servers (or the code under test's port probes) bind loopback sockets: the listener tier
pytestmark = pytest.mark.usefixtures("loopback_port")

GOOD, STALE = "the-current-key-1234", "a-stale-key-from-last-month"


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "secrets.yaml"
    path.write_text(f"api-key: {GOOD}\n")
    path.chmod(0o600)
    return path


def test_the_key_file_beats_a_stale_environment(key_file) -> None:
    env = {API_KEY_ENV: STALE}
    assert resolve_key(None, key_file, env).value == GOOD
    assert resolve_key(None, key_file, env, file_label="profile key file").source == f"profile key file {key_file}"
    assert resolve_key("flag-key", key_file, env).source == "--api-key"
    assert resolve_key(None, None, env).source == "$KIMI_SERVE_API_KEY"
    assert resolve_key(None, None, {}) == resolve_key(None, None, {}).__class__(None, "none")


def test_verify_cli_with_key_file_and_stale_env_passes_and_names_the_source(cli, key_file, monkeypatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, STALE)
    with ContractServer("correct", api_key=GOOD) as srv:
        res = cli("verify", "--host", srv.host, "--api-key-file", str(key_file), "--timeout", "20", "--json")
    report = json.loads(res.out)
    assert res.code == 0, report
    assert report["key_source"] == f"--api-key-file {key_file}"
    assert GOOD not in res.out and STALE not in res.out


def test_the_service_verifier_uses_the_profile_key_file_not_the_environment(key_file, monkeypatch) -> None:
    """restart's post-start check (and up's, which resolves the same way): today's stale env var would 401."""
    monkeypatch.setenv(API_KEY_ENV, STALE)
    with ContractServer("correct", api_key=GOOD) as srv:
        code, detail = contract_verifier(srv.host, key_file, "quick", 20.0)
    assert code == 0, detail


def test_the_service_verifier_passes_the_units_own_verify_options(key_file) -> None:
    """The profile's --accept-floor reaches the real `kimi-serve verify` restart runs: a floor verify refuses (exit
    2, its one line naming the option) proves the options are on its command line, before any request is sent."""
    code, detail = contract_verifier("127.0.0.1:9", key_file, "quick", 5.0, ("--accept-floor", "0.5"))
    assert code == 2 and "--accept-floor" in detail.split(" exited 2: ", 1)[1], detail


def test_a_rejected_key_names_its_source(monkeypatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, STALE)
    key = resolve_key()
    with ContractServer("correct", api_key=GOOD) as srv:
        report = run_verify(srv.host, api_key=key.value, key_source=key.source, timeout=20.0)
    assert report.exit_code == 1
    assert report.error is not None and report.error.code == "http_401"
    assert "(key from $KIMI_SERVE_API_KEY)" in report.error.message
    text = report.to_json()
    assert json.loads(text)["key_source"] == "$KIMI_SERVE_API_KEY" and STALE not in text
