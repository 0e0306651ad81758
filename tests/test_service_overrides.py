"""--set on install-service is recorded in the unit (under its hash) and `status` shows it as live."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("systemd_tools")


def test_install_with_set_is_recorded_and_shown_by_status(cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("KIMI_SERVE_SGLANG_PYTHON", raising=False)
    root = tmp_path / "root"
    root.mkdir()
    r = cli(
        "install-service", "-p", "sim", "--root", str(root), "--set", "server.port=31555", "--set", "verify.suite=full"
    )
    assert r.code == 0, r.err
    unit = (root / "etc/systemd/system/sglang-kimi.service").read_text()
    assert "31555" in unit and unit.splitlines()[1] == "# kimi-serve --set: server.port=31555 verify.suite=full"
    st = json.loads(cli("status", "--root", str(root), "-p", "sim", "--json").out)
    assert st["overrides"] == ["server.port=31555", "verify.suite=full"] and st["edited_since_install"] is False
    text = cli("status", "--root", str(root), "-p", "sim").out
    assert "overrides:    --set server.port=31555 --set verify.suite=full" in text
