"""`kimi-serve client-config` (docs/clients.md): every generated configuration is valid for its client (JSON, TOML, the
Python snippets compile, the TypeScript passes `node --check` where node is installed), reaches the router of a
replicated profile, never names a wildcard bind address, never holds the key, and says the served limits."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from kimi_serve.clients import CLIENTS
from kimi_serve.core.errors import ExitCode

ALL = sorted(CLIENTS)
KEY = "sk-client-config-secret-5e1b"


def _doc(cli, *args: str) -> dict:  # type: ignore[no-untyped-def]
    res = cli("client-config", *args, "--json")
    assert res.code == 0, (res.code, res.err)
    return json.loads(res.out)


def _parse(doc: dict, tmp_path: Path) -> object:
    """The generated text, parsed the way its client reads it."""
    fmt, text = doc["file"]["format"], doc["file"]["text"]
    if fmt == "json":
        return json.loads(text)
    if fmt == "toml":
        return tomllib.loads(text)
    if fmt == "python":
        tree = ast.parse(text)
        compile(tree, f"<{doc['client']}>", "exec")
        return tree
    assert fmt == "typescript", fmt
    assert text.count("{") == text.count("}") and text.count("(") == text.count(")"), text
    assert 'from "@ai-sdk/openai-compatible"' in text and 'from "ai"' in text
    node = shutil.which("node")
    if node is not None:  # the module is plain ESM JavaScript too: node checks its syntax
        module = tmp_path / f"{doc['client']}.mjs"
        module.write_text(text)
        res = subprocess.run([node, "--check", str(module)], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
    return text


@pytest.mark.parametrize("client", ALL)
@pytest.mark.parametrize(
    "args", [["-p", "sim-dp2"], ["-p", "prod-dp2"], ["-p", "prod"], ["--host", "gpu1.example.com"]]
)
def test_every_config_parses_and_names_the_front_door(cli, tmp_path, client, args) -> None:  # type: ignore[no-untyped-def]
    doc = _doc(cli, "--client", client, *args)
    _parse(doc, tmp_path)
    text = doc["file"]["text"]
    expected = {
        "sim-dp2": "http://127.0.0.1:30000/v1",  # the router; the replicas listen at 30010 and 30011
        "prod-dp2": "http://127.0.0.1:31000/v1",  # the router binds 0.0.0.0:31000; the replicas are 192.0.2.x
        "prod": "http://127.0.0.1:30000/v1",
        "gpu1.example.com": "http://gpu1.example.com:30000/v1",
    }[args[1]]
    assert doc["base_url"] == expected and expected in text
    assert doc["model"] == "kimi-k2.5" and '"kimi-k2.5"' in text
    assert "0.0.0.0" not in json.dumps(doc) and "30010" not in text and "192.0.2." not in text
    assert doc["context_length"] == 131072 and doc["max_output_tokens"] == 32768
    assert doc["reasoning_field"] == "reasoning_content"
    assert doc["api_key_env"] in text
    assert doc["thinking_off"]["how"]


def test_the_key_is_never_written(cli, tmp_path, write_profile, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The key file and $KIMI_SERVE_API_KEY hold a key: no output of any client names it, only the variable."""
    secret = tmp_path / "secrets.yaml"
    secret.write_text(f"api-key: {KEY}\n")
    secret.chmod(0o600)
    path = write_profile(f"extends: sim\nserver:\n  host: 0.0.0.0\n  api_key_file: {secret}\n")
    monkeypatch.setenv("KIMI_SERVE_API_KEY", KEY)
    for client in ALL:
        res = cli("client-config", "--client", client, "-p", str(path))
        assert res.code == 0 and KEY not in res.out + res.err, res.err
        doc = _doc(cli, "--client", client, "-p", str(path))
        assert KEY not in json.dumps(doc) and doc["api_key_required"] is True
        assert "0.0.0.0" not in doc["file"]["text"]
        assert any("--host" in a for a in doc["assumed"])  # the wildcard became loopback, said so


def test_opencode_provider_block(cli) -> None:  # type: ignore[no-untyped-def]
    doc = _doc(cli, "--client", "opencode", "-p", "prod", "--host", "gpu1.example.com")
    conf = json.loads(doc["file"]["text"])
    provider = conf["provider"]["kimi-serve"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {"baseURL": "http://gpu1.example.com:30000/v1", "apiKey": "{env:KIMI_SERVE_API_KEY}"}
    models = provider["models"]
    assert models["kimi-k2.5"]["limit"] == {"context": 131072, "output": 32768}
    instant = models["kimi-k2.5-instant"]
    assert instant["id"] == "kimi-k2.5" and instant["options"] == {"chat_template_kwargs": {"thinking": False}}
    assert conf["model"] == "kimi-serve/kimi-k2.5"


def test_kimi_cli_config_uses_the_served_context(cli) -> None:  # type: ignore[no-untyped-def]
    doc = _doc(cli, "--client", "kimi-cli", "-p", "prod")
    conf = tomllib.loads(doc["file"]["text"])
    provider = conf["providers"]["kimi-serve"]
    assert provider["type"] == "kimi" and provider["base_url"] == "http://127.0.0.1:30000/v1"
    assert provider["api_key"] == "" and doc["api_key_env"] == "KIMI_API_KEY"
    model = conf["models"]["kimi-k2.5"]
    # the served 131072 less the output budget: kimi-cli asks for max_context_size - its estimate - 1024, and with the
    # served context itself a server that counts the prompt higher than kimi-cli answers HTTP 400 (issue 48)
    assert model["max_context_size"] == 131072 - 32768 and model["model"] == "kimi-k2.5"
    assert "KIMI_MODEL_MAX_COMPLETION_TOKENS=32768" in " ".join(doc["notes"])
    assert conf["default_model"] == "kimi-k2.5"
    assert "thinking" in doc["thinking_off"]["how"] and isinstance(doc["thinking_off"]["honoured"], bool)


def test_context_follows_the_profile(cli, write_profile) -> None:  # type: ignore[no-untyped-def]
    path = write_profile("extends: sim\nmodel:\n  context_length: 65536\n  served_name: my-kimi\n")
    doc = _doc(cli, "--client", "openai", "-p", str(path))
    assert (doc["context_length"], doc["max_output_tokens"], doc["model"]) == (65536, 16384, "my-kimi")
    assert "max_tokens=16384" in doc["file"]["text"] and '"my-kimi"' in doc["file"]["text"]
    doc = _doc(cli, "--client", "opencode", "-p", "sim-dp2", "--set", "router.port=31500")
    assert doc["base_url"] == "http://127.0.0.1:31500/v1"


def test_without_a_profile_the_assumptions_are_listed(cli) -> None:  # type: ignore[no-untyped-def]
    doc = _doc(cli, "--client", "langchain", "--host", "10.1.2.3")
    assert doc["profile"] is None and doc["moonshot_thinking_honoured"] is None
    assert doc["base_url"] == "http://10.1.2.3:30000/v1"
    assumed = " ".join(doc["assumed"])
    assert "model name" in assumed and "context 131072" in assumed and "port 30000" in assumed
    doc = _doc(cli, "--client", "langchain", "--host", "10.1.2.3:8000")
    assert doc["base_url"] == "http://10.1.2.3:8000/v1" and "port" not in " ".join(doc["assumed"])
    res = cli("client-config", "--client", "openai", "--host", "10.1.2.3")
    assert res.code == 0 and re.search(r"^# assumed: model name", res.err, re.M), res.err


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--client", "nosuch", "-p", "prod"], "pass one of: opencode, kimi-cli, openai, openai-agents"),
        (["--client", "kimicli", "-p", "prod"], "did you mean 'kimi-cli'? (pass one of: opencode, kimi-cli"),
        (["--client", "openai-agent"], "did you mean 'openai-agents'?"),
        (["--client", "openai", "--host", "0.0.0.0"], "wildcard bind address"),
        (["--client", "openai", "--host", "[::]:30000"], "wildcard bind address"),
        *(
            (["--client", "openai", "--host", spelling], "wildcard bind address")
            for spelling in (
                "[::0]",
                "[0:0:0:0:0:0:0:0]",
                "[::ffff:0.0.0.0]",
                "[::0]:30000",
                "0x0",
                "0x0:30000",
                "0",
                "000.0.0.0",
                "0.0",
                "0.0.0",
                "0x00000000",
                "http://0x0:30000",
                "https://[::0]/kimi",
                "http://[0:0::0]:8000/v1",
            )
        ),
        (["--client", "openai", "-p", "prod", "--host", "http://a b"], "--host"),
        (["--client", "openai"], "neither --profile nor --host"),
        (["--client", "openai", "-p", "nosuch-profile"], "nosuch-profile"),
        (["--client", "openai", "--host", "h1", "--set", "server.port=1"], "--set without --profile"),
    ],
)
def test_bad_input_is_one_line_exit_2(cli, args, needle) -> None:  # type: ignore[no-untyped-def]
    res = cli("client-config", *args)
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert res.code == ExitCode.USAGE and len(lines) == 1 and needle in lines[0], res.err
    assert "Traceback" not in res.err and res.out == ""


def test_kimi_cli_is_told_whether_the_server_honours_moonshots_thinking_field(cli, write_profile) -> None:  # type: ignore[no-untyped-def]
    """kimi-cli turns thinking off with Moonshot's `thinking: {"type": "disabled"}`: honoured by the Kimi patch set's
    0004 (prod applies it), ignored by SGLang without it."""
    doc = _doc(cli, "--client", "kimi-cli", "-p", "prod")
    assert doc["moonshot_thinking_honoured"] is True and doc["thinking_off"]["honoured"] is True
    path = write_profile("extends: sim\npatch_set: sglang-0.5.23-sm120\n")
    doc = _doc(cli, "--client", "kimi-cli", "-p", str(path))
    assert doc["moonshot_thinking_honoured"] is False and doc["thinking_off"]["honoured"] is False
    assert "IGNORED" in doc["thinking_off"]["how"] and "moonshot_thinking_field" in doc["thinking_off"]["how"]
    assert _doc(cli, "--client", "openai", "-p", str(path))["thinking_off"]["honoured"] is True  # chat_template_kwargs


def _node_string(literal: str) -> str:
    """What JavaScript reads ``literal`` (a string literal of the AI SDK module) as: node evaluates it."""
    node = shutil.which("node")
    if node is None:
        return str(json.loads(literal))  # a JSON string is a JavaScript string literal
    script = f"process.stdout.write(JSON.stringify({literal}))"
    res = subprocess.run([node, "-e", script], capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    return str(json.loads(res.stdout))


def _strings(tree: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


NAMES = [
    "kimi-\U0001f600",  # beyond the BMP: one character, a surrogate pair in JSON and JavaScript
    "kimi-\U0001d11e\U0001f600x",
    "kimi-k2.5-\u00e9t\u00e9",
    "\u6a21\u578b",
    'kimi-"quoted"',
    "kimi\\back\\slash",
    "kimi-\u0416\u0436",
    "kimi-\U00020000",  # CJK beyond the BMP
    "kimi-${x}-{{y}}-\\u0041",
]


@pytest.mark.parametrize("name", NAMES)
def test_any_unicode_name_is_written_as_each_language_reads_it(cli, tmp_path, write_profile, name) -> None:  # type: ignore[no-untyped-def]
    """The served name (which check accepts) comes back exactly from every generated configuration, parsed in its own
    language: TOML (tomllib), JSON, Python (ast + compile: no lone surrogates), JavaScript (node)."""
    path = write_profile(yaml.safe_dump({"extends": "sim", "model": {"served_name": name}}, allow_unicode=True))
    assert cli("check", "-p", str(path)).code == 0
    for client in ALL:
        doc = _doc(cli, "--client", client, "-p", str(path))
        assert doc["model"] == name
        text = doc["file"]["text"]
        assert text.isascii(), client  # every literal escaped: no encoding can mangle it
        parsed = _parse(doc, tmp_path)
        if doc["file"]["format"] == "toml":
            assert isinstance(parsed, dict) and parsed["default_model"] == name
            assert parsed["models"][name]["model"] == name
        elif doc["file"]["format"] == "json":
            assert isinstance(parsed, dict) and parsed["model"] == f"kimi-serve/{name}"
            assert name in parsed["provider"]["kimi-serve"]["models"]
        elif doc["file"]["format"] == "python":
            strings = _strings(parsed)  # type: ignore[arg-type]
            assert name in strings, (client, strings)
            assert all(s.encode("utf-8") for s in strings)  # a lone surrogate does not encode
        else:
            literal = re.search(r"model: kimi\((.*)\),$", text, re.M)
            assert literal is not None, text
            assert _node_string(literal.group(1)) == name


@pytest.mark.parametrize(
    "profile_text, expected, assumed",
    [
        ("server: {host: '::0'}", "http://[::1]:30000/v1", "host ::1"),
        ("server: {host: '0:0:0:0:0:0:0:0'}", "http://[::1]:30000/v1", "host ::1"),
        ("server: {host: '::ffff:0.0.0.0'}", "http://127.0.0.1:30000/v1", "host 127.0.0.1"),
        ("server: {host: '0x0'}", "http://127.0.0.1:30000/v1", "host 127.0.0.1"),
        ("server: {host: '0'}", "http://127.0.0.1:30000/v1", "host 127.0.0.1"),
        ("server: {host: '000.0.0.0'}", "http://127.0.0.1:30000/v1", "host 127.0.0.1"),
    ],
)
def test_a_wildcard_bind_in_any_spelling_is_never_the_base_url(  # type: ignore[no-untyped-def]
    cli, write_profile, profile_text, expected, assumed
) -> None:
    """A profile's server.host that binds every interface, however spelled, becomes this machine's loopback (listed
    as assumed), as 0.0.0.0 does."""
    path = write_profile(f"extends: sim\nallow_unauthenticated: true\n{profile_text}\n")
    for client in ALL:
        doc = _doc(cli, "--client", client, "-p", str(path))
        assert doc["base_url"] == expected and expected in doc["file"]["text"].replace("\\/", "/")
        assert any(a.startswith(assumed) and "wildcard" in a for a in doc["assumed"]), doc["assumed"]


@pytest.mark.parametrize("host", ["0x0", "::0", "0.0", "::ffff:0.0.0.0"])
def test_the_routers_wildcard_bind_in_any_spelling_is_never_the_base_url(cli, write_profile, host) -> None:  # type: ignore[no-untyped-def]
    path = write_profile(f"extends: sim-dp2\nallow_unauthenticated: true\nrouter: {{host: '{host}'}}\n")
    doc = _doc(cli, "--client", "opencode", "-p", str(path))
    assert doc["base_url"] in ("http://127.0.0.1:30000/v1", "http://[::1]:30000/v1")
    assert f"//{host}:" not in doc["base_url"] and f"[{host}]" not in doc["base_url"]
    assert any("wildcard" in a for a in doc["assumed"])


@pytest.mark.parametrize(
    "profile_text, needle",
    [
        ("model: {served_name: 'kimi:k2'}", "contains ':'"),
        ('model: {served_name: "kimi-\\ud83d"}', "lone surrogate"),  # a YAML escape: a lone surrogate
        ('model: {served_name: "kimi-\\x07"}', "control character"),
        ("server: {host: '0x0'}", "without an API key"),  # check's auth rule, the wildcard judged as an address
        ("parallel: {tp_size: 3}", "tp_size"),
        # parsers that cannot serve a client (issue 48: opencode was once told "tool_call": true): refused, the fix named
        ("parsers: {tool_call: null}", "parsers.tool_call: no tool-call parser is set"),
        (
            "parsers: {reasoning: null}",
            "(fix: set parsers.reasoning: kimi_k2, which launches SGLang with --reasoning-parser kimi_k2)",
        ),
    ],
)
def test_a_profile_check_rejects_gets_no_configuration(cli, write_profile, profile_text, needle) -> None:  # type: ignore[no-untyped-def]
    """client-config runs check's rules first: exit 2, check's own finding (file:line: key), nothing on stdout."""
    path = write_profile(f"extends: sim\n{profile_text}\n")
    checked = cli("check", "-p", str(path))
    assert checked.code != 0, checked.out
    for client in ALL:
        res = cli("client-config", "--client", client, "-p", str(path))
        lines = [line for line in res.err.splitlines() if line.strip()]
        assert res.code == ExitCode.USAGE and len(lines) == 1 and needle in lines[0], res.err
        assert f"{path}:2:" in lines[0] and "Traceback" not in res.err and res.out == ""


@pytest.mark.parametrize(
    "host, unspecified, loopback, connect",
    [
        ("0.0.0.0", True, False, "127.0.0.1"),
        ("0", True, False, "127.0.0.1"),
        ("0x0", True, False, "127.0.0.1"),
        ("0.0", True, False, "127.0.0.1"),
        ("000.0.0.0", True, False, "127.0.0.1"),
        ("", True, False, "127.0.0.1"),
        ("::", True, False, "::1"),
        ("::0", True, False, "::1"),
        ("[::0]", True, False, "::1"),
        ("0:0:0:0:0:0:0:0", True, False, "::1"),
        ("[::ffff:0.0.0.0]", True, False, "127.0.0.1"),
        ("127.1", False, True, "127.1"),
        ("0x7f000001", False, True, "0x7f000001"),
        ("::ffff:127.0.0.1", False, True, "::ffff:127.0.0.1"),
        ("[::1]", False, True, "[::1]"),
        ("localhost", False, True, "localhost"),
        ("10.1.2.3", False, False, "10.1.2.3"),
        ("0.0.0.0 x", False, False, "0.0.0.0 x"),  # inet_aton would take the number before the space: not here
        ("0x1ffffffff", False, False, "0x1ffffffff"),  # out of range: a name, not an address
        ("gpu0.example.com", False, False, "gpu0.example.com"),
    ],
)
def test_addresses_are_judged_as_addresses(host: str, unspecified: bool, loopback: bool, connect: str) -> None:
    """core/net.py: the address a spelling stands for (ipaddress, and the numeric forms inet_aton reads), not its text."""
    from kimi_serve.core.net import connect_host, is_loopback, is_unspecified

    assert (is_unspecified(host), is_loopback(host), connect_host(host)) == (unspecified, loopback, connect)
