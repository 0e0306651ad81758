"""The wheel ships what the code reads: profiles, the unit template, patch sets, the flag table, stand-in assets."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_wheel_contains_runtime_files(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = next(tmp_path.glob("kimi_serve-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"kimi_serve/_data/configs/{p.name}" for p in (REPO / "configs").glob("*.yaml")}
    expected |= {f"kimi_serve/_data/systemd/{p.name}" for p in (REPO / "systemd").glob("*.j2")}
    expected |= {
        f"kimi_serve/_data/patches/{p.relative_to(REPO / 'patches')}"
        for p in (REPO / "patches").rglob("*")
        if p.is_file()
    }
    expected |= {
        "kimi_serve/profile/data/sglang-0.5.23-flags.json",
        "kimi_serve/simulator/assets/kimi-k25/config.json",
        "kimi_serve/simulator/assets/eagle3-mla/config.json",
    }
    locks = REPO / "kimi_serve" / "engine" / "lockfiles"
    expected |= {f"kimi_serve/engine/lockfiles/{p.name}" for p in locks.iterdir() if p.is_file()}
    assert {"kimi_serve/engine/lockfiles/gpu.txt", "kimi_serve/engine/lockfiles/cpu.txt"} <= expected
    assets = REPO / "kimi_serve" / "simulator" / "assets"
    expected |= {f"kimi_serve/simulator/assets/{p.relative_to(assets)}" for p in assets.rglob("*") if p.is_file()}
    data = [d for d in (REPO / "kimi_serve").rglob("data") if d.is_dir()]  # profile/, simulator/, bench/ data files
    expected |= {str(f.relative_to(REPO)) for d in data for f in d.iterdir() if f.is_file()}
    assert "kimi_serve/simulator/data/words.json" in expected and "kimi_serve/bench/data/agentic.json" in expected
    assert len(expected) > 8
    missing = sorted(expected - names)
    assert not missing, missing
