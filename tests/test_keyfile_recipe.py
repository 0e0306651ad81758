"""One story for the API-key file: doctor, check, up's preflight and install-service print the same recipe,
`kimi-serve keyfile --profile P` (install-service adds its --root), and the recipe, run as printed on a fresh host
(no folder), makes a file that `check` accepts: 0600, an api-key, and a distinct admin-api-key. The old recipe
(`install -m 600 /dev/null FILE && echo 'api-key: ...'`) failed on a fresh host and made a file check refused."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

# the contract dry run is not asked for; up --dry-run's preflight probes its port: the listener tier
pytestmark = pytest.mark.usefixtures("loopback_port")

RECIPE = "kimi-serve keyfile --profile {profile}"


def run_as_printed(recipe: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The printed command line, through /bin/sh, with `kimi-serve` the one this test runs (first on PATH)."""
    environ = {k: v for k, v in os.environ.items() if k != "KIMI_SERVE_API_KEY"}
    environ |= {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{environ.get('PATH', '')}",
        "KIMI_SERVE_STATE_DIR": str(tmp_path / "state"),
        **env,
    }
    return subprocess.run(["/bin/sh", "-c", recipe], capture_output=True, text=True, env=environ, timeout=120)


@pytest.fixture
def fresh(write_profile, tmp_path: Path) -> tuple[Path, Path]:
    """A keyed profile reachable beyond loopback (so it needs a distinct admin key) whose key file's folder does not
    exist yet: a fresh host."""
    key = tmp_path / "etc" / "kimi-serve" / "fresh-secrets.yaml"
    return key, write_profile(f"extends: sim\nserver:\n  host: 0.0.0.0\n  api_key_file: {key}\n", name="fresh")


def key_finding(cli, profile: Path) -> dict:  # type: ignore[no-untyped-def]
    res = cli("check", "-p", str(profile), "--json")
    found = [f for f in json.loads(res.out)["findings"] if f["layer"] == "host" and "key" in f["code"]]
    assert len(found) == 1, found
    return found[0]


def doctor_finding(cli, profile: Path) -> dict:  # type: ignore[no-untyped-def]
    doc = json.loads(cli("doctor", "-p", str(profile), "--json").out)
    return next(f for f in doc["findings"] if f["code"] == "api_key_file")


def test_every_place_prints_one_recipe_and_it_makes_a_file_check_accepts(cli, fresh, tmp_path: Path) -> None:
    key, profile = fresh
    recipe = RECIPE.format(profile=profile)
    check = key_finding(cli, profile)
    assert check["status"] == "fail" and "does not exist" in check["message"]
    assert check["fix"] == f"create it: {recipe}"
    doctor = doctor_finding(cli, profile)
    assert doctor["status"] == "fail" and doctor["fix"] == check["fix"]
    up = cli("up", "-p", str(profile), "--dry-run")
    assert up.code == 5 and f"create it: {recipe}" in up.err and len(up.err.strip().splitlines()) == 1

    done = run_as_printed(recipe, tmp_path)  # no $KIMI_SERVE_API_KEY: a new random clients' key
    assert done.returncode == 0, done.stderr
    assert f"wrote {key} (mode 0600)" in done.stdout and "admin-api-key" in done.stdout
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and key.parent.is_dir()
    data = yaml.safe_load(key.read_text())
    assert data["api-key"] and data["admin-api-key"] and data["api-key"] != data["admin-api-key"]
    for secret in data.values():  # no key is ever printed
        assert secret not in done.stdout + done.stderr

    check = key_finding(cli, profile)
    assert check["status"] == "pass" and "distinct admin key" in check["message"], check
    assert doctor_finding(cli, profile)["status"] == "pass"
    again = run_as_printed(recipe, tmp_path)
    assert again.returncode == 0 and "unchanged" in again.stdout, again
    assert yaml.safe_load(key.read_text()) == data


def test_the_old_recipes_file_gets_its_admin_key_from_the_same_recipe(cli, fresh, tmp_path: Path) -> None:
    """What the old doctor recipe made (an api-key alone): check and doctor refuse it naming the same command, which
    keeps the clients' key and adds a distinct admin key."""
    key, profile = fresh
    key.parent.mkdir(parents=True)
    key.write_text("api-key: clients-key-123\n")
    key.chmod(0o600)
    check = key_finding(cli, profile)
    recipe = RECIPE.format(profile=profile)
    assert check["status"] == "fail" and "has no admin-api-key" in check["message"]
    assert check["fix"].startswith(recipe) and doctor_finding(cli, profile)["fix"] == check["fix"]
    done = run_as_printed(recipe, tmp_path)
    assert done.returncode == 0, done.stderr
    data = yaml.safe_load(key.read_text())
    assert data["api-key"] == "clients-key-123" and data["admin-api-key"] not in ("", "clients-key-123")
    assert key_finding(cli, profile)["status"] == "pass"


def test_the_recipe_takes_the_clients_key_from_the_environment(fresh, tmp_path: Path) -> None:
    key, profile = fresh
    done = run_as_printed(RECIPE.format(profile=profile), tmp_path, KIMI_SERVE_API_KEY="from-env-456")
    assert done.returncode == 0 and "from $KIMI_SERVE_API_KEY" in done.stdout, done
    assert yaml.safe_load(key.read_text())["api-key"] == "from-env-456" and "from-env-456" not in done.stdout
    dashed = run_as_printed(RECIPE.format(profile=profile), tmp_path, KIMI_SERVE_API_KEY="-dash")
    assert dashed.returncode == 2 and "begins with '-'" in dashed.stderr and "Traceback" not in dashed.stderr


@pytest.mark.parametrize("kind", ["a directory", "a symbolic link"])
def test_what_is_not_a_file_is_never_replaced(fresh, tmp_path: Path, kind: str) -> None:
    key, profile = fresh
    target = tmp_path / "elsewhere.yaml"
    target.write_text("api-key: abc\n")
    target.chmod(0o600)
    if kind == "a directory":
        key.mkdir(parents=True)
    else:
        key.parent.mkdir(parents=True)
        key.symlink_to(target)
    done = run_as_printed(RECIPE.format(profile=profile), tmp_path)
    assert done.returncode == 1 and f"is {kind}" in done.stderr and "move it aside" in done.stderr, done
    assert len(done.stderr.strip().splitlines()) == 1
    assert (key.is_dir() if kind == "a directory" else key.is_symlink()) and target.read_text() == "api-key: abc\n"


def test_a_profile_without_a_key_file_is_told_how_to_name_one(cli) -> None:
    res = cli("keyfile", "-p", "sim")
    assert res.code == 2 and "server.api_key_file" in res.err and len(res.err.strip().splitlines()) == 1


@pytest.mark.usefixtures("systemd_tools")
def test_install_service_names_the_recipe_with_its_root(cli, fresh, tmp_path: Path, monkeypatch) -> None:
    """install-service without $KIMI_SERVE_API_KEY and without the file: the same recipe, under its --root; run as
    printed, the install's own dry run then plans no key file to create (the file is there and passes)."""
    monkeypatch.delenv("KIMI_SERVE_API_KEY", raising=False)
    monkeypatch.delenv("KIMI_SERVE_SGLANG_PYTHON", raising=False)
    key, profile = fresh
    root = tmp_path / "root"
    root.mkdir()
    res = cli("install-service", "-p", str(profile), "--root", str(root), "--dry-run")
    recipe = f"{RECIPE.format(profile=profile)} --root {root}"
    assert res.code == 1 and f"or create it first: {recipe})" in res.out, (res.out[-600:], res.err)
    done = run_as_printed(recipe, tmp_path)
    assert done.returncode == 0, done.stderr
    inside = root / str(key).lstrip("/")
    assert stat.S_IMODE(inside.stat().st_mode) == 0o600 and not key.exists()
    plan = cli("install-service", "-p", str(profile), "--root", str(root), "--dry-run", "--json")
    assert plan.code == 0, plan.err
    assert json.loads(plan.out)["create_secret"] is False
