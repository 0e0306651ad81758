"""The code base stays lint-clean (ruff), formatted (ruff format) and type-checks (mypy, strict on the pure core),
rules in pyproject.toml. These are the commit hooks of .pre-commit-config.yaml; this test runs those same hooks over
the whole tree, so a commit made without them still fails CI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / ".pre-commit-config.yaml"


def test_the_hooks_are_local_and_cover_ruff_format_and_mypy() -> None:
    config = yaml.safe_load(CONFIG.read_text())
    assert [r["repo"] for r in config["repos"]] == ["local"]  # nothing fetched from the network
    hooks = {h["id"]: h for r in config["repos"] for h in r["hooks"]}
    assert set(hooks) == {"ruff", "ruff-format", "mypy"}
    assert all(h["language"] == "system" and h["entry"].startswith(".venv/bin/") for h in hooks.values())


def test_the_pre_commit_hooks_pass_on_the_whole_tree(tmp_path: Path) -> None:
    pre_commit = Path(sys.executable).parent / "pre-commit"
    if not pre_commit.exists():
        pytest.skip("pre-commit not installed (scripts/dev-venv.sh installs it from the dev lock)")
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: pre-commit runs over git's files")
    # its own home (no user cache touched); the hooks' .venv/bin/ is this interpreter's folder
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit"), "SKIP": ""}
    out = subprocess.run(
        [str(pre_commit), "run", "--all-files", "--color", "never"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
