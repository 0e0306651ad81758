"""The unit's sandbox (service.hardening), measured with the real `systemd-analyze security --offline=yes` and kept
clean under `systemd-analyze verify`; the real-systemd run of the hardened unit is tests/systemd/."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_serve.check.report import validated_launch
from kimi_serve.profile.loader import load_profile
from kimi_serve.service.unit import UnitContext, render_unit

pytestmark = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed (apt-get install systemd)"
)
MAX_EXPOSURE = 5.0
_SCORE = re.compile(r"Overall exposure level for \S+: (\d+(?:\.\d+)?) ")


def _unit(tmp_path: Path, write_profile, hardening: str) -> Path:  # type: ignore[no-untyped-def]
    """prod's unit, rendered with this interpreter and a real kimi-serve so that verify can check the commands."""
    profile = write_profile(
        f'extends: prod\npython: {sys.executable}\nservice:\n  hardening: "{hardening}"\n', name=f"prod-{hardening}"
    )
    loaded = load_profile(str(profile))
    kimi = Path(sys.executable).parent / "kimi-serve"
    ctx = UnitContext(kimi_serve=str(kimi), package_root=str(tmp_path))
    path = tmp_path / "sglang-kimi.service"
    path.write_text(render_unit(loaded, validated_launch(loaded), ctx).text)
    return path


def exposure(unit: Path) -> float:
    done = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        check=False,
    )
    found = _SCORE.search(done.stdout + done.stderr)
    assert found, done.stdout + done.stderr
    return float(found.group(1))


def test_strict_prod_unit_scores_at_most_5(tmp_path: Path, write_profile) -> None:  # type: ignore[no-untyped-def]
    unit = _unit(tmp_path, write_profile, "strict")
    score = exposure(unit)
    print(f"systemd-analyze security exposure, prod strict: {score}")
    assert score <= MAX_EXPOSURE
    text = unit.read_text()
    # what a GPU server needs stays: the NVIDIA devices, netlink, W+X memory for the JITs, writable JIT caches
    assert "DeviceAllow=char-nvidia-frontend rw" in text and "AF_NETLINK" in text
    assert "MemoryDenyWriteExecute" not in text and "PrivateDevices" not in text and "PrivateUsers" not in text
    assert "CacheDirectory=kimi-serve" in text and '"TRITON_CACHE_DIR=/var/cache/kimi-serve/triton"' in text
    assert "User=kimi-serve" in text


def test_levels_order_and_verify_stays_clean(tmp_path: Path, write_profile) -> None:  # type: ignore[no-untyped-def]
    scores = {}
    for level in ("strict", "relaxed", "off"):
        (tmp_path / level).mkdir()
        unit = _unit(tmp_path / level, write_profile, level)
        done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False)
        assert done.returncode == 0 and not done.stderr.strip(), (level, done.stderr)
        scores[level] = exposure(unit)
    print(f"systemd-analyze security exposure: {scores}")
    assert scores["strict"] < scores["relaxed"] < scores["off"]
    assert scores["off"] > MAX_EXPOSURE  # off is the unit of before (as a non-root user)
