"""install-service --dry-run on a host without the GPUs, the model files or the interpreter: the unit and the actions
are shown, then every host check that would fail (exit 1); nothing is written; messages name the rooted paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("systemd_tools")


def test_preview_of_prod_on_a_bare_host(cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("KIMI_SERVE_SGLANG_PYTHON", raising=False)
    monkeypatch.delenv("KIMI_SERVE_API_KEY", raising=False)
    root = tmp_path / "root"
    root.mkdir()
    res = cli("install-service", "-p", "prod", "--root", str(root), "--dry-run")
    assert res.code == 1, (res.out, res.err)
    assert "ExecStart=" in res.out and "install-service would:" in res.out
    assert f"write {root}/etc/systemd/system/sglang-kimi.service" in res.out
    tail = res.out.split("would fail (install-service would refuse):", 1)[1]
    assert "model directory /models/Kimi-K2.5 does not exist" in tail
    assert f"API-key file {root}/etc/kimi-serve/prod-secrets.yaml does not exist" in tail  # the rooted path
    assert "/etc/kimi-serve/prod-secrets.yaml (missing" in res.out
    assert list(root.iterdir()) == []  # nothing written
    doc = json.loads(cli("install-service", "-p", "prod", "--root", str(root), "--dry-run", "--json").out)
    assert doc["exit_code"] == 1 and doc["ok"] is False and doc["dry_run"] is True and "ExecStart=" in doc["unit_text"]
    assert any(f["status"] == "fail" and f["code"] == "model.path" for f in doc["findings"])
    # one report shape for a unit and a deployment: the one unit is a deployment of one member
    assert doc["deployment"] == [
        {"role": "single", "index": 0, "unit": "sglang-kimi.service", "endpoint": "0.0.0.0:30000"}
    ] and [u["unit_text"] for u in doc["units"]] == [doc["unit_text"]]
    # without --dry-run the same host is refused with one line
    real = cli("install-service", "-p", "prod", "--root", str(root))
    assert real.code == 1 and len(real.err.strip().splitlines()) == 1 and list(root.iterdir()) == []


def test_invalid_profile_is_still_exit_2_in_preview(cli, tmp_path: Path, write_profile) -> None:
    bad = write_profile("extends: prod\nparsers:\n  tool_call: null\n")
    res = cli("install-service", "-p", str(bad), "--root", str(tmp_path), "--dry-run")
    assert res.code == 2 and "tool_call" in res.err
