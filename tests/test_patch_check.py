"""`check`'s patch layer: the profile's patch set against the pinned wheel (offline) and the installed SGLang."""

from __future__ import annotations

import json

import pytest

from kimi_serve.patches import cached_wheel


@pytest.fixture(autouse=True)
def _fast_layers_only(monkeypatch):
    """These tests are about kimi-serve's own layers: skip the ~12 s SGLang probe (tests/test_sglang_tier.py has it)."""
    monkeypatch.delenv("KIMI_SERVE_SGLANG_PYTHON", raising=False)


def _patch_findings(res):
    return {f["code"]: f for f in json.loads(res.out)["findings"] if f["layer"] == "patches"}


def test_offline_check_applies_the_set_to_the_pinned_wheel(cli):
    if cached_wheel("0.5.23") is None:
        pytest.skip("pinned wheel not cached (scripts/test.sh fetches it; CI always has it)")
    res = cli("check", "--profile", "prod", "--offline", "--json")
    f = _patch_findings(res)["wheel"]
    assert f["status"] == "pass" and "apply cleanly" in f["message"]


def test_offline_check_without_the_wheel_warns_with_the_fetch_command(cli, monkeypatch, tmp_path):
    monkeypatch.delenv("KIMI_SERVE_SGLANG_WHEEL", raising=False)
    monkeypatch.setenv("KIMI_SERVE_WHEEL_CACHE", str(tmp_path))
    f = _patch_findings(cli("check", "--profile", "prod", "--offline", "--json"))["wheel"]
    assert f["status"] == "warn" and "fetch-sglang-wheel.sh" in f["fix"]


def test_a_wheel_of_another_version_fails(cli, monkeypatch, tmp_path):
    real = cached_wheel("0.5.23")
    if real is None:
        pytest.skip("pinned wheel not cached")
    import zipfile

    fake = tmp_path / "sglang-0.5.23-py3-none-any.whl"
    with zipfile.ZipFile(real) as src, zipfile.ZipFile(fake, "w") as dst:
        for name in src.namelist():
            if name.startswith("sglang/"):
                data = src.read(name)
                if name == "sglang/_version.py":
                    data = data.replace(b"0.5.23", b"0.5.24")
                dst.writestr(name, data)
    monkeypatch.setenv("KIMI_SERVE_SGLANG_WHEEL", str(fake))
    f = _patch_findings(cli("check", "--profile", "prod", "--offline", "--json"))["wheel"]
    assert f["status"] == "fail" and "0.5.24" in f["message"]


def test_on_host_a_missing_interpreter_is_reported_once(cli, write_profile, tmp_path):
    path = write_profile(f"extends: prod\npython: {tmp_path}/nope/bin/python\n")
    res = cli("check", "--profile", str(path), "--json")
    findings = json.loads(res.out)["findings"]
    python_fails = [f for f in findings if f["status"] == "fail" and "nope/bin/python" in f["message"]]
    assert len(python_fails) == 1 and python_fails[0]["layer"] == "host"
    assert res.code == 1


def test_simulator_engine_needs_no_installed_patches(cli, write_profile):
    path = write_profile("extends: sim\n")
    f = _patch_findings(cli("check", "--profile", str(path), "--json"))
    assert f["installed"]["status"] == "skip"
