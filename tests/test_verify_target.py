"""HOST parsing and API key sources for `kimi-serve verify`."""

from __future__ import annotations

import pytest

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.verify.target import API_KEY_ENV, parse_target, resolve_key


@pytest.mark.parametrize(
    ("host", "base"),
    [
        ("0.0.0.0:30000", "http://127.0.0.1:30000"),
        ("[::]:30000", "http://[::1]:30000"),
        ("[::1]:8000", "http://[::1]:8000"),
        ("gpu-box:30000", "http://gpu-box:30000"),
        ("gpu-box", "http://gpu-box:30000"),
        ("10.0.0.5:8080", "http://10.0.0.5:8080"),
        ("http://gpu-box:30000", "http://gpu-box:30000"),
        ("https://api.example.com/kimi/", "https://api.example.com:443/kimi"),
        ("http://gpu-box:30000/v1", "http://gpu-box:30000"),
        ("http://0.0.0.0:30000", "http://127.0.0.1:30000"),
    ],
)
def test_host_forms(host: str, base: str) -> None:
    assert parse_target(host).base_url == base


@pytest.mark.parametrize(
    ("host", "words"),
    [
        ("", "empty host"),
        ("::1", "brackets"),
        ("ftp://gpu-box:21", "unsupported scheme"),
        ("gpu-box:99999", "invalid host or port"),
        ("gpu-box:abc", "invalid host or port"),
        ("gpu-box:0", "port 0"),
        ("a" * 300, "253 in all"),
        ("http://gpu-box:30000/" + "p" * 600, "characters long (at most 512)"),
        ("a" * 300 + ":30000", "not a host name"),
        ("30000", "HOST:PORT"),
        ("http//127.0.0.1:30000", "HOST:PORT"),
        ("gpu box:30000", "spaces or control characters"),
        ("gpu-box:30000/v1", "neither HOST:PORT nor a URL"),
        ("300.1.2.3:30000", "not a valid IPv4 address"),
        ("http://gpu_box!:30000", "not a host name"),
        ("http://gpu-box:30000/a b", "spaces"),
    ],
)
def test_bad_hosts_are_usage_errors(host: str, words: str) -> None:
    with pytest.raises(KimiServeError) as info:
        parse_target(host)
    assert info.value.exit_code == ExitCode.USAGE
    assert words in info.value.one_line()
    assert "fix:" in info.value.one_line()


def test_key_order_flag_then_file_then_env(tmp_path) -> None:
    key_file = tmp_path / "key.yaml"
    key_file.write_text("api-key: from-file\n")
    key_file.chmod(0o600)
    env = {API_KEY_ENV: "from-env"}
    assert resolve_key("from-flag", key_file, env).value == "from-flag"
    assert resolve_key(None, key_file, env).value == "from-file"
    assert resolve_key(None, None, env).value == "from-env"
    assert resolve_key(None, key_file, {}).value == "from-file"
    assert resolve_key(None, None, {}).value is None


@pytest.mark.parametrize("text", ["api-key: k-123\n", "api_key: k-123\n", "k-123\n", "host: 0.0.0.0\napi-key: k-123\n"])
def test_key_file_forms(tmp_path, text: str) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(text)
    key_file.chmod(0o600)
    assert resolve_key(None, key_file, {}).value == "k-123"


@pytest.mark.parametrize("mode", [0o640, 0o644, 0o604])
def test_key_file_open_to_others_is_refused(tmp_path, mode: int) -> None:
    key_file = tmp_path / "key.yaml"
    key_file.write_text("api-key: very-secret-key\n")
    key_file.chmod(mode)
    with pytest.raises(KimiServeError) as info:
        resolve_key(None, key_file, {})
    line = info.value.one_line()
    assert info.value.exit_code == ExitCode.USAGE
    assert f"chmod 600 {key_file}" in line and f"{mode:04o}" in line
    assert "very-secret-key" not in line


@pytest.mark.parametrize(
    ("text", "words"), [("", "no API key"), ("host: x\nport: 1\n", "no API key"), ("a\nb\n", "no API key")]
)
def test_key_file_without_a_key(tmp_path, text: str, words: str) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(text)
    key_file.chmod(0o600)
    with pytest.raises(KimiServeError, match=words):
        resolve_key(None, key_file, {})


def test_missing_key_file(tmp_path) -> None:
    with pytest.raises(KimiServeError, match="not found"):
        resolve_key(None, tmp_path / "absent", {})


@pytest.mark.parametrize("host", ["a" * 300, "30000", "http//127.0.0.1:30000", "exa\x00mple:80"])
def test_cli_bad_host_is_one_line_exit_2(host: str, cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("verify", "--host", host, "--timeout", "2")
    assert result.code == ExitCode.USAGE, result.err
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and "--host" in lines[0] and "fix:" in lines[0] and "Traceback" not in result.err
