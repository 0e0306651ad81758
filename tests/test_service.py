"""install-service / uninstall-service / status under an injected --root, with the real systemd-analyze and
`systemctl --root` (offline: enable/disable write the symlinks). Starting units needs a running systemd: that is
tests/systemd/. SGLang's own parser layer of `check` is covered by the check tests; it is switched off here (no
$KIMI_SERVE_SGLANG_PYTHON) to keep these tests about the service files.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

KEY = "sk-test-5%$HOME\"'\\-ünïcode"

pytestmark = pytest.mark.usefixtures("systemd_tools")


@pytest.fixture(autouse=True)
def _no_sglang_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KIMI_SERVE_SGLANG_PYTHON", raising=False)


@pytest.fixture
def profile(write_profile: Callable[..., Path]) -> Path:
    return write_profile(
        """\
        extends: sim
        server:
          api_key_file: /etc/kimi-serve/test-secrets.yaml
        """,
        name="svc",
    )


def _snapshot(root: Path) -> dict[str, tuple[int, bytes | str]]:
    out: dict[str, tuple[int, bytes | str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            content: bytes | str = os.readlink(p) if p.is_symlink() else (p.read_bytes() if p.is_file() else b"")
            out[str(p.relative_to(root))] = (st.st_mode, content)
    return out


def test_install_writes_unit_secret_and_enablement(
    cli, root: Path, profile: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KIMI_SERVE_API_KEY", KEY)
    r = cli("install-service", "--profile", str(profile), "--root", str(root))
    assert r.code == 0, r.err
    unit = root / "etc/systemd/system/sglang-kimi.service"
    assert stat.S_IMODE(unit.stat().st_mode) == 0o644
    text = unit.read_text()
    assert '"--config" "/etc/kimi-serve/test-secrets.yaml"' in text
    secret = root / "etc/kimi-serve/test-secrets.yaml"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    import yaml

    data = yaml.safe_load(secret.read_text())
    assert data["api-key"] == KEY
    # a distinct random admin key, never printed: SGLang then refuses the clients' key on its admin endpoints
    assert len(data["admin-api-key"]) >= 32 and data["admin-api-key"] != KEY
    assert data["admin-api-key"] not in r.out + r.err
    # the service user: created in the root's user database for real, owning the key file and working directory
    users = (root / "etc/passwd").read_text()
    uid = next(int(line.split(":")[2]) for line in users.splitlines() if line.startswith("kimi-serve:"))
    assert secret.stat().st_uid == uid and (root / "var/lib/kimi-serve/server").stat().st_uid == uid
    assert (root / "var/lib/kimi-serve").stat().st_uid == os.geteuid()  # kimi-serve's own state stays its owner's
    assert "User=kimi-serve" in text
    wants = root / "etc/systemd/system/multi-user.target.wants/sglang-kimi.service"
    assert os.readlink(wants) == "/etc/systemd/system/sglang-kimi.service"  # real `systemctl --root enable`
    assert "sk-test" not in text and "sk-test" not in r.out + r.err


def test_reinstall_keeps_the_previous_unit(
    cli, root: Path, profile: Path, write_profile, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KIMI_SERVE_API_KEY", KEY)
    assert cli("install-service", "-p", str(profile), "--root", str(root)).code == 0
    unit = root / "etc/systemd/system/sglang-kimi.service"
    first = unit.read_text()
    second_profile = write_profile("extends: svc\nserver:\n  port: 30123\n", name="svc2")
    refused = cli("install-service", "-p", str(second_profile), "--root", str(root))
    assert refused.code == 5 and "is the unit of profile 'svc'" in refused.err and "--replace" in refused.err
    assert unit.read_text() == first
    assert cli("install-service", "-p", str(second_profile), "--root", str(root), "--replace").code == 0
    assert '"--port" "30123"' in unit.read_text()
    assert (root / "var/lib/kimi-serve/service/sglang-kimi/previous.service").read_text() == first
    # the same unit written again is no change: previous.service stays the unit before the last change
    assert cli("install-service", "-p", str(second_profile), "--root", str(root), "--replace").code == 0
    assert (root / "var/lib/kimi-serve/service/sglang-kimi/previous.service").read_text() == first


def test_dry_run_touches_nothing(
    cli, root: Path, profile: Path, write_profile, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an installed unit with records, and a key in the environment that a real run would write to a new file
    monkeypatch.setenv("KIMI_SERVE_API_KEY", KEY)
    assert cli("install-service", "-p", str(profile), "--root", str(root)).code == 0
    other = write_profile(
        "extends: svc\nserver:\n  api_key_file: /etc/kimi-serve/new.yaml\n  port: 30999\n", name="svc3"
    )
    before = _snapshot(root)
    r = cli("install-service", "-p", str(other), "--root", str(root), "--dry-run", "--replace")
    assert r.code == 0, r.err
    assert _snapshot(root) == before
    assert '"--port" "30999"' in r.out
    assert f"{root}/etc/kimi-serve/new.yaml (will be created from $KIMI_SERVE_API_KEY" in r.out
    # every file or folder the plan names is where the install writes it: under --root (the key file, the working
    # directory, the monitor's folders and units, not their paths on /)
    plan = r.out.split("install-service would:")[1]
    named = re.findall(r"(?<![\w=.-])/[\w./@-]+", plan)
    assert named and [p for p in named if not p.startswith(str(root)) and not p.startswith("/dev/")] == []
    assert "sk-test" not in r.out + r.err
    assert "keep the current unit as" in r.out and "enable sglang-kimi.service" in r.out
    r = cli("uninstall-service", "--root", str(root), "--dry-run")
    assert r.code == 0 and _snapshot(root) == before


def test_refuses_a_unit_it_did_not_write(cli, root: Path, profile: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIMI_SERVE_API_KEY", KEY)
    unit = root / "etc/systemd/system/sglang-kimi.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server\n")
    before = _snapshot(root)
    r = cli("install-service", "-p", str(profile), "--root", str(root))
    assert r.code == 5
    assert "was not written by kimi-serve" in r.err and len(r.err.strip().splitlines()) == 1
    assert cli("uninstall-service", "--root", str(root)).code == 5
    assert _snapshot(root) == before


def test_missing_secret_without_key_is_one_clear_line(cli, root: Path, profile: Path) -> None:
    r = cli("install-service", "-p", str(profile), "--root", str(root))
    assert r.code == 1
    assert f"API-key file {root}/etc/kimi-serve/test-secrets.yaml does not exist" in r.err  # the path it checked
    assert "KIMI_SERVE_API_KEY" in r.err
    assert not (root / "etc/systemd/system/sglang-kimi.service").exists()


def test_group_readable_secret_is_refused(cli, root: Path, profile: Path) -> None:
    secret = root / "etc/kimi-serve/test-secrets.yaml"
    secret.parent.mkdir(parents=True)
    secret.write_text("api-key: x\n")
    secret.chmod(0o640)
    r = cli("install-service", "-p", str(profile), "--root", str(root))
    assert r.code == 1 and "chmod 600" in r.err


def test_now_needs_the_running_system(cli, root: Path, profile: Path) -> None:
    r = cli("install-service", "-p", str(profile), "--root", str(root), "--now")
    assert r.code == 2 and "--now" in r.err


def test_invalid_profile_stops_before_any_write(cli, root: Path, write_profile) -> None:
    bad = write_profile("extends: sim\nparsers:\n  tool_call: qwen25\n", name="bad")
    r = cli("install-service", "-p", str(bad), "--root", str(root))
    assert r.code == 2 and "parsers.tool_call" in r.err
    assert sorted(p.name for p in root.rglob("*")) == ["etc", "group", "passwd"]  # only the fixture's user database


def test_status_reports_profile_records_and_hand_edits(
    cli, root: Path, profile: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KIMI_SERVE_API_KEY", KEY)
    assert cli("install-service", "-p", str(profile), "--root", str(root)).code == 0
    r = cli("status", "--root", str(root), "--json")
    data = json.loads(r.out)
    assert (data["installed"], data["profile"], data["patch_set"], data["edited_since_install"]) == (
        True,
        "svc",
        "sglang-0.5.23-sm120+sglang-0.5.23-kimi",
        False,
    )
    assert data["last_verify"] is None and "not the running system" in data["state_error"]
    assert r.code == 1  # not active
    unit = root / "etc/systemd/system/sglang-kimi.service"
    unit.write_text(unit.read_text().replace("RestartSec=10", "RestartSec=1"))
    assert json.loads(cli("status", "--root", str(root), "--json").out)["edited_since_install"] is True


def test_uninstall_reverses_install_and_keeps_the_secret(
    cli, root: Path, profile: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KIMI_SERVE_API_KEY", KEY)
    assert cli("install-service", "-p", str(profile), "--root", str(root)).code == 0
    r = cli("uninstall-service", "-p", str(profile), "--root", str(root))
    assert r.code == 0, r.err
    assert not (root / "etc/systemd/system/sglang-kimi.service").exists()
    assert not (root / "etc/systemd/system/multi-user.target.wants/sglang-kimi.service").exists()
    assert not (root / "var/lib/kimi-serve/service/sglang-kimi").exists()
    assert (root / "etc/kimi-serve/test-secrets.yaml").exists()
    again = cli("uninstall-service", "--root", str(root))
    assert again.code == 0 and "not installed" in again.out
