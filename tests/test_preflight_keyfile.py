"""Preflight catches what it can before a cold start: `up`, `doctor`, `install-service` and `restart` refuse a
missing or group-readable API-key file (core/keyfile.py's rule) before anything starts; one model-directory rule for
check, doctor and up; an env override that contradicts a profile switch is a finding."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimi_serve.check.launch import launch_for
from kimi_serve.check.rules import run_rules
from kimi_serve.core.findings import FAIL, WARN
from kimi_serve.host.facts import check_model_dir
from kimi_serve.profile.loader import load_profile

# its servers (or the code under test's port probes) bind loopback sockets: the listener tier
pytestmark = pytest.mark.usefixtures("loopback_port")


def _one_line(res, code: int) -> str:  # type: ignore[no-untyped-def]
    assert res.code == code, (res.code, res.out, res.err)
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in res.err, res.err
    return lines[0]


@pytest.fixture
def keyed(write_profile, tmp_path: Path):  # type: ignore[no-untyped-def]
    key = tmp_path / "secrets.yaml"
    return key, write_profile(f"extends: sim\nserver:\n  api_key_file: {key}\n", name="keyed")


def test_up_refuses_a_missing_key_file_before_starting(cli, keyed) -> None:
    key, profile = keyed
    line = _one_line(cli("up", "-p", str(profile), "--dry-run"), 5)
    assert f"API-key file {key} does not exist" in line and f"create it: kimi-serve keyfile --profile {profile}" in line
    assert "keyed.yaml:3: server.api_key_file" in line


def test_up_and_doctor_refuse_a_0644_key_file(cli, keyed, sglang_python: str) -> None:
    key, profile = keyed
    key.write_text("api-key: k\n")
    key.chmod(0o644)
    line = _one_line(cli("up", "-p", str(profile), "--dry-run"), 5)
    assert "readable by others (mode 644)" in line and f"chmod 600 {key}" in line
    assert cli("doctor", "-p", str(profile)).code == 5
    key.chmod(0o600)
    assert cli("up", "-p", str(profile), "--dry-run").code == 0


@pytest.mark.usefixtures("systemd_tools")
@pytest.mark.parametrize("command", ["install-service", "restart"])
def test_service_commands_refuse_a_0644_key_file_first(cli, keyed, command, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("KIMI_SERVE_SGLANG_PYTHON", raising=False)
    # STAND-IN: a running systemd (this host has none: both would refuse with 5 first, tests/test_no_systemd.py)
    monkeypatch.setattr("kimi_serve.service.systemctl.Systemd.unreachable", lambda self: None)
    key, profile = keyed
    key.write_text("api-key: k\n")
    key.chmod(0o644)
    args = [command, "-p", str(profile)] + (["--root", "/"] if command == "install-service" else [])
    line = _one_line(cli(*args), 1)
    assert "readable by others" in line and f"chmod 600 {key}" in line


def test_one_model_directory_rule(tmp_path: Path, write_profile, cli) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "kimi_k25"}')
    direct = [f for f in check_model_dir(str(model), "model", "model", repo="r", tokenizer=True) if f.status == FAIL]
    assert direct and "no *.safetensors shards" in direct[0].message
    profile = write_profile(
        f"extends: prod\nmodel:\n  path: {model}\nspeculative:\n  enabled: false\nallreduce:\n  pcie_ipc: false\n",
        name="onlyconfig",
    )
    check = cli("check", "-p", str(profile), "--json")
    import json

    fails = [f for f in json.loads(check.out)["findings"] if f["status"] == "fail" and f["code"] == "model.path"]
    assert fails and fails[0]["message"] == direct[0].message
    assert cli("doctor", "-p", str(profile)).code == 5


@pytest.mark.parametrize("env, switch, status", [('"0"', "true", FAIL), ('"1"', "false", WARN)])
def test_env_that_contradicts_the_pcie_ipc_switch(write_profile, env, switch, status) -> None:
    p = load_profile(
        str(
            write_profile(
                f"extends: prod\nallreduce:\n  pcie_ipc: {switch}\nenv:\n  SGLANG_ENABLE_PCIE_IPC_ALLREDUCE: {env}\n"
            )
        )
    )
    found = [f for f in run_rules(p, launch_for(p)) if f.code == "env"]
    assert found and found[0].status == status and "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE" in found[0].message
    assert "env" in found[0].where


SGLANG_READS_CONFIG = """
import json, sys
from sglang.srt.server_args import prepare_server_args
results = {}
for path in sys.argv[1:]:
    try:
        prepare_server_args(["--model-path", "/nonexistent", "--config", path])
        results[path] = 0
    except SystemExit as exc:
        results[path] = exc.code
print(json.dumps(results))
"""


def test_sglang_itself_stops_on_a_key_beginning_with_a_dash(sglang_python: str, tmp_path: Path) -> None:
    """The fact the rule stands on, on SGLang 0.5.23's own --config merger and parser (one interpreter, both files):
    exit 2 at start for a dashed key, none for a dash inside one."""
    import json
    import subprocess

    files = {}
    for name, value in (("dashed", "-Zq3abc"), ("inner", "Zq3-abc")):
        files[name] = tmp_path / f"{name}.yaml"
        files[name].write_text(f"api-key: {value}\n")
        files[name].chmod(0o600)
    done = subprocess.run(
        [sglang_python, "-c", SGLANG_READS_CONFIG, *map(str, files.values())],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-800:]
    codes = json.loads(done.stdout.strip().splitlines()[-1])
    assert codes[str(files["dashed"])] == 2
    assert "argument --api-key: expected one argument" in done.stderr
    assert codes[str(files["inner"])] in (0, None), done.stderr[-800:]


@pytest.mark.parametrize("entry", ["api-key: -Zq3abc", "api-key: ok\nadmin-api-key: '-Zq3abc'"])
def test_check_and_doctor_refuse_a_key_beginning_with_a_dash(cli, keyed, entry: str) -> None:
    key, profile = keyed
    key.write_text(entry + "\n")
    key.chmod(0o600)
    line = _one_line(cli("up", "-p", str(profile), "--dry-run"), 5)
    name = "admin-api-key" if "admin" in entry else "api-key"
    assert f"its {name} begins with '-'" in line and f"argument --{name}: expected one argument" in line
    assert "use a key that does not begin with '-'" in line
    res = cli("check", "-p", str(profile), "--json")
    import json

    fails = [f for f in json.loads(res.out)["findings"] if f["status"] == "fail"]
    assert res.code == 1 and any(f"its {name} begins with '-'" in f["message"] for f in fails)


def test_every_key_kimi_serve_draws_avoids_a_leading_dash(monkeypatch) -> None:
    from kimi_serve.core import keyfile

    draws = iter(["-first", "-second", "third", "-again", "fourth"])
    monkeypatch.setattr("secrets.token_urlsafe", lambda n=None: next(draws))
    assert keyfile.new_key() == "third"  # the dry run's stand-in key
    assert keyfile.new_admin_key() == "fourth"  # install-service's admin key


def test_install_refuses_a_dashed_key_in_the_environment(monkeypatch) -> None:
    from kimi_serve.core.errors import KimiServeError
    from kimi_serve.service.secret import _one_line_key

    with pytest.raises(KimiServeError) as err:
        _one_line_key("-Zq3abc")
    assert "begins with '-'" in err.value.message and err.value.where == "KIMI_SERVE_API_KEY"
    assert _one_line_key(" Zq3-abc\n") == "Zq3-abc"
