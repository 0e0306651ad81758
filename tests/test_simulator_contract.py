"""The contract dry run: the simulator started with a profile's exact SGLang argv, verify run against it, stopped.
Passes for prod; fails with verify's diagnosis when a parser flag is removed from the profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimi_serve.check.dryrun import start_contract_dryrun
from kimi_serve.profile.loader import load_profile


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "secrets.yaml"
    path.write_text("api-key: contract-key\n")
    path.chmod(0o600)
    return path


def test_prod_passes_the_contract(sglang_python: str, write_profile, key_file: Path, tmp_path: Path) -> None:
    profile = write_profile(f"extends: prod\nserver:\n  api_key_file: {key_file}\n", name="prod-sim")
    run = start_contract_dryrun(load_profile(str(profile)), log_dir=tmp_path).finish()
    assert run.exit_code == 0, run.report.to_json()
    assert run.simulator_exit == 0
    assert run.argv[1:4] == ["-P", "-m", "kimi_serve.simulator"]
    assert "--tool-call-parser" in run.argv and "--config" in run.argv and "--host" in run.argv
    assert "contract-key" not in run.log_path.read_text()  # the key never reaches the log


def test_removing_the_reasoning_parser_fails_with_the_diagnosis(
    sglang_python: str, write_profile, key_file: Path, tmp_path: Path
) -> None:
    profile = write_profile(
        f"extends: prod\nparsers:\n  reasoning: null\nserver:\n  api_key_file: {key_file}\n", name="prod-noreason"
    )
    run = start_contract_dryrun(load_profile(str(profile)), log_dir=tmp_path).finish()
    assert run.exit_code == 1
    assert "--reasoning-parser" not in run.argv
    text = run.report.to_json()
    assert "--reasoning-parser kimi_k2" in text and "</think>" in text
