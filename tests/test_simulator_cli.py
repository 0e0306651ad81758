"""`kimi-serve simulate` argument handling that needs no sglang: clear one-line errors and exit codes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kimi_serve.sglang.site import SGLANG_PYTHON_ENV
from kimi_serve.simulator import launcher


def test_no_sglang_python_is_an_environment_error(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SGLANG_PYTHON_ENV, sys.executable)  # the project venv: no sglang in it
    r = cli("simulate", "--raw", "--", "--model-path", "/models/Kimi-K2.5")
    assert r.code == 5
    assert "can import sglang" in r.err and "scripts/build-cpu-venv.sh" in r.err and "Traceback" not in r.err


def test_profile_xor_raw(cli) -> None:
    assert cli("simulate").code == 2
    assert cli("simulate", "--profile", "prod", "--raw", "--", "--port", "1").code == 2


def test_missing_api_key_file_is_named(cli, write_profile, tmp_path: Path) -> None:
    path = write_profile(f"extends: prod\nserver:\n  api_key_file: {tmp_path}/absent.yaml\n", name="sim-nokey")
    r = cli("simulate", "--profile", str(path), "--dry-run")
    assert r.code == 5 and "absent.yaml" in r.err and "does not exist" in r.err


def test_with_flag_replaces_or_appends() -> None:
    assert launcher.with_flag(["--port", "1", "--x"], "--port", "2") == ["--port", "2", "--x"]
    assert launcher.with_flag(["--port=1"], "--port", "2") == ["--port=2"]
    assert launcher.with_flag(["--x"], "--host", "h") == ["--x", "--host", "h"]


def test_server_info_blanks_an_admin_key_that_starts_with_the_clients_key() -> None:
    """`K` and `K-admin`: the longer key is blanked first, so no `<redacted>-admin` is left in the launch command."""
    from types import SimpleNamespace

    from kimi_serve.simulator.routes import REDACTED, redacted_info

    args = SimpleNamespace(
        resolved_dict=lambda: {"api_key": "K", "admin_api_key": "K-admin", "port": 1},
        launch_command="python -m sglang.launch_server --api-key K --admin-api-key K-admin",
    )
    info = redacted_info(args)
    assert info["api_key"] == info["admin_api_key"] == REDACTED
    assert info["launch_command"] == f"python -m sglang.launch_server --api-key {REDACTED} --admin-api-key {REDACTED}"
