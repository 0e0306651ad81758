"""The unit's sandbox (service.hardening), measured with the real `systemd-analyze security --offline=yes` and kept
clean under `systemd-analyze verify`; the real-systemd run of the hardened unit is tests/systemd/."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_serve.check.launch import validated_launch
from kimi_serve.profile.loader import load_profile
from kimi_serve.service.unit import UnitContext, render_unit

pytestmark = pytest.mark.usefixtures("systemd_tools")
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


def test_monitoring_units_score_at_most_5_and_keep_their_job(tmp_path: Path, write_profile) -> None:  # type: ignore[no-untyped-def]
    """The verify oneshot and the alert template (root at exposure 9.6 before #29.6): an HTTP client that writes only
    its records' and the metrics file's directories, and gets the service user's 0600 key file from systemd."""
    from kimi_serve.service.monitor_units import render_monitor

    profile = load_profile(str(write_profile(f"extends: prod\npython: {sys.executable}\n", name="prod-mon")))
    kimi = Path(sys.executable).parent / "kimi-serve"
    ctx = UnitContext(kimi_serve=str(kimi), package_root=str(tmp_path))
    launch = validated_launch(profile)
    main = render_unit(profile, launch, ctx)
    monitor = render_monitor(profile, launch, ctx, main.name)
    assert monitor is not None
    for unit in (main, *monitor.files):
        (tmp_path / unit.name).write_text(unit.text)
    verify, alert = tmp_path / monitor.service.name, tmp_path / monitor.alert.name
    done = subprocess.run(
        ["systemd-analyze", "verify", *(str(tmp_path / u.name) for u in (main, *monitor.files))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
    scores = {"verify": exposure(verify), "alert": exposure(alert)}
    print(f"systemd-analyze security exposure, monitoring units: {scores}")
    assert max(scores.values()) <= MAX_EXPOSURE, scores

    lines = verify.read_text().splitlines()
    assert "User=root" in lines and "CapabilityBoundingSet=" in lines and "ProtectSystem=strict" in lines
    # writable: the unit's records and the node_exporter directory, nothing else
    assert [x for x in lines if x.startswith("ReadWritePaths=")] == [
        'ReadWritePaths="-/var/lib/kimi-serve/service/sglang-kimi"',
        'ReadWritePaths="-/var/lib/prometheus/node-exporter"',
    ]
    assert monitor.writable == ("/var/lib/kimi-serve/service/sglang-kimi", "/var/lib/prometheus/node-exporter")
    assert "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6" in lines
    # the key: systemd's private copy of the service user's file, named on the command line
    assert "LoadCredential=api-key.yaml:/etc/kimi-serve/prod-secrets.yaml" in lines
    exec_start = next(x for x in lines if x.startswith("ExecStart="))
    assert '"--api-key-file" "/run/credentials/sglang-kimi-verify.service/api-key.yaml"' in exec_start
    assert "/etc/kimi-serve/prod-secrets.yaml" not in exec_start
    alert_lines = alert.read_text().splitlines()
    assert "DynamicUser=yes" in alert_lines and "CapabilityBoundingSet=" in alert_lines
    assert not any(x.startswith("ReadWritePaths=") for x in alert_lines)
