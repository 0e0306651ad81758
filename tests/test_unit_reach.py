"""Can the unit start? Its interpreter, start gate and model judged as the service user inside the unit's sandbox
(kimi_serve/host/unit_reach.py), on a tree under an injected root: the usual ways a unit fails with 203/EXEC (a venv
whose python resolves into a 0700 /root, a command under /tmp behind PrivateTmp=yes, a script whose #! interpreter
is out of reach), and the layouts that work."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from kimi_serve.host.unit_reach import ENTER, LOAD, RUN, Need, Sandbox, reach_findings

HARDENED = Sandbox(protect_home="yes", private_tmp=True, capabilities=False)
READ_ONLY_HOME = Sandbox(protect_home="read-only", private_tmp=True, capabilities=False)
OFF = Sandbox()

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root (CI runs as root)")


def _file(path: Path, text: str = "", mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def _pyenv_venv(root: Path, home_mode: int = 0o700) -> None:
    """/opt/venv/bin/python -> /root/.pyenv/versions/3.11.7/bin/python3.11, the layout `python -m venv` gives."""
    _file(root / "root/.pyenv/versions/3.11.7/bin/python3.11")
    (root / "root").chmod(home_mode)
    (root / "opt/venv/bin").mkdir(parents=True)
    (root / "opt/venv/bin/python").symlink_to("/root/.pyenv/versions/3.11.7/bin/python3.11")


def _one(found: list, *parts: str) -> str:
    assert len(found) == 1, found
    line = found[0].line()
    for part in parts:
        assert part in line, line
    assert found[0].code == "unit.reach" and found[0].status == "fail"
    return line


def test_a_venv_python_resolving_into_a_closed_root_is_out_of_reach(tmp_path: Path) -> None:
    _pyenv_venv(tmp_path)
    need = Need("interpreter", "/opt/venv/bin/python", RUN, "p.yaml:3: python")
    line = _one(
        reach_findings([need], READ_ONLY_HOME, "kimi-serve", root=tmp_path),
        "p.yaml:3: python: the interpreter /opt/venv/bin/python (resolves to /root/.pyenv/versions/3.11.7/bin/"
        "python3.11) is out of reach: kimi-serve cannot enter /root; the unit cannot start",
        "fix: ",
        "/usr/bin/python3 -m venv",
    )
    assert "\n" not in line
    # ProtectHome=yes hides it outright, whatever the bits say
    _one(reach_findings([need], HARDENED, "kimi-serve", root=tmp_path), "hidden from the unit: ProtectHome=yes")


def test_a_traversable_home_under_a_read_only_protect_home_is_fine(tmp_path: Path) -> None:
    _pyenv_venv(tmp_path, home_mode=0o711)
    need = Need("interpreter", "/opt/venv/bin/python", RUN)
    assert reach_findings([need], READ_ONLY_HOME, "kimi-serve", root=tmp_path) == []


def test_a_command_under_tmp_is_hidden_by_private_tmp(tmp_path: Path) -> None:
    _file(tmp_path / "tmp/build/bin/kimi-serve")
    gate = Need("start gate command", "/tmp/build/bin/kimi-serve", RUN, "server")
    _one(reach_findings([gate], HARDENED, "kimi-serve", root=tmp_path), "PrivateTmp=yes gives the unit an empty /tmp")
    (tmp_path / "var/tmp/w").mkdir(parents=True)
    _one(
        reach_findings([Need("working directory", "/var/tmp/w", ENTER)], HARDENED, "kimi-serve", root=tmp_path),
        "empty /var/tmp",
    )
    # no sandbox (hardening: off): /tmp is the host's
    assert reach_findings([gate], OFF, "kimi-serve", root=tmp_path) == []
    # a path missing under the root is not judged (an offline --root install names the target host's files)
    missing = Need("start gate command", "/tmp/elsewhere/kimi-serve", RUN)
    assert reach_findings([missing], HARDENED, "kimi-serve", root=tmp_path) == []


def test_a_scripts_interpreter_is_checked_too(tmp_path: Path) -> None:
    _pyenv_venv(tmp_path)
    _file(tmp_path / "usr/local/bin/kimi-serve", "#!/opt/venv/bin/python\nimport kimi_serve\n")
    gate = Need("start gate command", "/usr/local/bin/kimi-serve", RUN)
    _one(
        reach_findings([gate], READ_ONLY_HOME, "kimi-serve", root=tmp_path),
        "the interpreter of /usr/local/bin/kimi-serve /opt/venv/bin/python (resolves to",
        "cannot enter /root",
    )
    # #!/usr/bin/env python3 is a PATH lookup: not judged
    _file(tmp_path / "usr/local/bin/other", "#!/usr/bin/env python3\n")
    assert reach_findings([Need("x", "/usr/local/bin/other", RUN)], HARDENED, "kimi-serve", root=tmp_path) == []


def test_a_directory_of_the_link_itself_must_be_open(tmp_path: Path) -> None:
    _file(tmp_path / "usr/bin/python3")
    (tmp_path / "srv/venv/bin").mkdir(parents=True)
    (tmp_path / "srv/venv/bin/python").symlink_to("/usr/bin/python3")
    (tmp_path / "srv/venv").chmod(0o700)
    _one(
        reach_findings([Need("interpreter", "/srv/venv/bin/python", RUN)], HARDENED, "kimi-serve", root=tmp_path),
        "cannot enter /srv/venv",
    )


def test_an_unexecutable_command_and_an_unreadable_model_file(tmp_path: Path) -> None:
    _file(tmp_path / "opt/x/python", mode=0o744)
    _one(reach_findings([Need("interpreter", "/opt/x/python", RUN)], HARDENED, "svc", root=tmp_path), "cannot execute")
    _file(tmp_path / "models/k/config.json", "{}", mode=0o644)
    _file(tmp_path / "models/k/model-1.safetensors", "", mode=0o600)
    model = Need("model", "/models/k", LOAD, "model.path")
    _one(reach_findings([model], HARDENED, "svc", root=tmp_path), "cannot read /models/k/model-1.safetensors")
    (tmp_path / "models/k/model-1.safetensors").chmod(0o644)
    assert reach_findings([model], HARDENED, "svc", root=tmp_path) == []


def test_the_users_own_bits_and_groups_count(tmp_path: Path) -> None:
    """A user in the root's passwd/group files is judged as its owner and group bits say."""
    _file(tmp_path / "etc/passwd", "root:x:0:0::/root:/bin/sh\nsvc:x:990:990::/nonexistent:/usr/sbin/nologin\n", 0o644)
    _file(tmp_path / "etc/group", "root:x:0:\nsvc:x:990:\nml:x:991:svc\n", 0o644)
    _file(tmp_path / "srv/own/python")
    _file(tmp_path / "srv/team/python")
    if os.geteuid() == 0:
        os.chown(tmp_path / "srv/own", 990, 990)
        os.chown(tmp_path / "srv/team", 0, 991)
    (tmp_path / "srv/own").chmod(0o700)
    (tmp_path / "srv/team").chmod(0o750)
    needs = [Need("a", "/srv/own/python", RUN), Need("b", "/srv/team/python", RUN)]
    if os.geteuid() == 0:
        assert reach_findings(needs, HARDENED, "svc", root=tmp_path) == []
    # a user that does not exist yet owns nothing and is in no group
    assert len(reach_findings(needs, HARDENED, "newuser", root=tmp_path)) == 2


@needs_root
def test_root_has_no_capabilities_under_the_hardened_sandbox(tmp_path: Path) -> None:
    _file(tmp_path / "etc/passwd", "root:x:0:0::/root:/bin/sh\n", 0o644)
    _file(tmp_path / "srv/theirs/python")
    os.chown(tmp_path / "srv/theirs", 1234, 1234)
    (tmp_path / "srv/theirs").chmod(0o700)
    need = Need("interpreter", "/srv/theirs/python", RUN)
    _one(reach_findings([need], HARDENED, "root", root=tmp_path), "root cannot enter /srv/theirs")
    assert reach_findings([need], OFF, "root", root=tmp_path) == []  # CAP_DAC_OVERRIDE without the sandbox


def test_sandbox_settings_are_read_from_the_units_lines() -> None:
    from kimi_serve.service.hardening import sandbox

    assert Sandbox.from_lines(sandbox("strict", [], "yes")) == HARDENED
    assert Sandbox.from_lines(sandbox("relaxed", [], "read-only")) == READ_ONLY_HOME
    assert Sandbox.from_lines(sandbox("off", [], "yes")) == OFF


def _python_behind_a_closed_root(root: Path) -> Path:
    """A system root where this interpreter's path links to /root/py/bin/python3 under a 0700 /root."""
    python = Path(sys.executable)
    (root / python.parent.relative_to("/")).mkdir(parents=True)
    _file(root / "root/py/bin/python3")
    (root / "root").chmod(0o700)
    (root / python.relative_to("/")).symlink_to("/root/py/bin/python3")
    return root


@pytest.mark.usefixtures("systemd_tools")
def test_install_service_refuses_before_writing_and_the_dry_run_lists_it(cli, tmp_path: Path, write_profile) -> None:
    """install-service --root R with an interpreter that R's layout puts behind a closed /root: exit 5, one line,
    nothing written; --dry-run shows the finding."""
    python = Path(sys.executable)
    root = _python_behind_a_closed_root(tmp_path / "root")
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    profile = write_profile(f"extends: sim\npython: {python}\n")
    res = cli("install-service", "-p", str(profile), "--root", str(root))
    assert res.code == 5, (res.out, res.err)
    assert len(res.err.strip().splitlines()) == 1, res.err
    # hidden: by ProtectHome=yes (the path as written is not under a home, so the unit hides the resolved /root), or
    # by PrivateTmp=yes where this checkout itself lives under /tmp
    # (or, where this host's own interpreter resolves into /root, ProtectHome=read-only and the closed /root)
    assert f"the interpreter {python} (resolves to /root/py/bin/python3) is " in res.err
    assert "is hidden from the unit: " in res.err or "kimi-serve cannot enter /root" in res.err
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before  # nothing written
    doc = json.loads(cli("install-service", "-p", str(profile), "--root", str(root), "--dry-run", "--json").out)
    assert doc["ok"] is False
    assert [f["code"] for f in doc["findings"] if f["status"] == "fail"] == ["unit.reach"], doc["findings"]
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


def test_doctor_judges_the_unit_as_install_service_does(
    cli, tmp_path: Path, write_profile, monkeypatch, loopback_port
) -> None:
    """doctor runs the same unit.reach judgement on the system the unit runs on ($KIMI_SERVE_ACCOUNTS_ROOT): a fail
    with the path and the fix where the interpreter resolves into a closed /root or the start gate's kimi-serve is not
    executable for the service user; a pass once both are in reach. The start gate is judged by its own path (it
    once was judged as "/", its first character)."""
    from kimi_serve.service.unit import UnitContext

    monkeypatch.setattr("kimi_serve.host.doctor.check_sglang", lambda *a: [])
    gate = Path(UnitContext.detect().kimi_serve)
    python = Path(sys.executable)
    root = _python_behind_a_closed_root(tmp_path / "system")
    _file(root / gate.relative_to("/"), mode=0o700)  # not executable for kimi-serve
    monkeypatch.setenv("KIMI_SERVE_ACCOUNTS_ROOT", str(root))
    profile = write_profile(f"extends: prod\npython: {python}\nserver:\n  port: {loopback_port()}\n")
    res = cli("doctor", "-p", str(profile), "--json")
    assert res.code == 5, (res.out, res.err)
    reach = [c for c in json.loads(res.out)["checks"] if c["code"] == "unit.reach"]
    assert [c["status"] for c in reach] == ["fail", "fail"], reach
    assert f"the interpreter {python} (resolves to /root/py/bin/python3) is " in reach[0]["message"]
    assert f"the start gate command {gate} is out of reach: kimi-serve cannot execute {gate}" in reach[1]["message"]
    assert "/usr/bin/python3 -m venv" in reach[0]["fix"] and reach[0]["where"].endswith(": python")
    text = cli("doctor", "-p", str(profile)).out
    assert "FAIL  unit.reach" in text and "fix: install it where the service user can run it" in text
    # a simulator profile is a foreground try, up runs as the invoking user: the same judgement warns, naming
    # install-service, and fails nothing (install-service itself still refuses: the test above)
    sim = write_profile(f"extends: sim\npython: {python}\nserver:\n  port: {loopback_port()}\n", name="simreach")
    res = cli("doctor", "-p", str(sim), "--json")
    reach = [c for c in json.loads(res.out)["checks"] if c["code"] == "unit.reach"]
    assert [c["status"] for c in reach] == ["warn", "warn"], reach
    assert all(c["message"].startswith("install-service only (up runs as you): ") for c in reach), reach
    assert not [c for c in json.loads(res.out)["checks"] if c["status"] == "fail"] and res.code == 0, res.out
    profile = sim
    (root / "root").chmod(0o711)
    (root / gate.relative_to("/")).chmod(0o755)
    reach = [
        c for c in json.loads(cli("doctor", "-p", str(profile), "--json").out)["checks"] if c["code"] == "unit.reach"
    ]
    assert [(c["status"], c["layer"]) for c in reach] == [("pass", "doctor")], reach
