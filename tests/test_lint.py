"""The code base stays lint-clean (ruff) and type-checks (mypy, strict on the pure core), rules in pyproject.toml:
unused imports, shadowed names, bare re-raises, a None where a str is due are bugs waiting to happen, so they fail
the suite like any other defect."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_ruff_is_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.skip("ruff not installed (pip install -e '.[test]')")
    out = subprocess.run(
        [ruff, "check", "kimi_serve", "tests", "scripts", "benchmarks"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_is_clean():
    mypy = shutil.which("mypy") or str(Path(sys.executable).parent / "mypy")
    if not Path(mypy).exists():
        pytest.skip("mypy not installed (pip install -e '.[test]')")
    out = subprocess.run([mypy], cwd=REPO, capture_output=True, text=True, check=False, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
