"""The code base stays lint-clean (ruff, rules in pyproject.toml): unused imports, shadowed names, bare re-raises
and the like are bugs waiting to happen, so they fail the suite like any other defect."""

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
    out = subprocess.run([ruff, "check", "kimi_serve", "tests", "scripts", "benchmarks"], cwd=REPO,
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
