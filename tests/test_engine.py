"""`engine install` and `engine status`: atomic builds from a lock, the host lock, the record, drift.

The fast tests never install anything real (a failing install must leave the previous venv byte-identical, whatever
made it fail); the `sglang`-marked ones build the CPU engine from its lock in a temp prefix (uv's cache makes that
a few seconds once warm) and patch it with prod's patch set.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from kimi_serve.core.lock import lock_path
from kimi_serve.engine import install as eng
from kimi_serve.engine import locks
from kimi_serve.engine.discover import find_uv
from kimi_serve.engine.plan import make_plan
from kimi_serve.engine.prefix import RECORD_NAME, clear_leftovers

BOGUS_HASH = "0" * 64


@pytest.fixture
def _own_host_lock() -> Path:
    path = lock_path()  # under this test's own state root (conftest)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _tree(root: Path) -> dict[str, str]:
    """Every entry under root: file hash and mode, symlink target, folder mode: a byte-identical fingerprint."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            st = p.lstat()
            if p.is_symlink():
                out[rel] = f"-> {os.readlink(p)}"
            elif p.is_dir():
                out[rel] = f"dir {oct(st.st_mode)}"
            else:
                out[rel] = f"{oct(st.st_mode)} {hashlib.sha256(p.read_bytes()).hexdigest()}"
    return out


@pytest.fixture
def old_venv(tmp_path: Path) -> Path:
    prefix = tmp_path / "opt" / "venv"
    venv.create(prefix, with_pip=False)
    (prefix / "kimi-serve-engine.json").write_text('{"lock": "cpu", "note": "the previous engine"}\n')
    return prefix


def _bogus_lock(tmp_path: Path, line: str) -> Path:
    path = tmp_path / "bogus.txt"
    path.write_text(f"# kimi-serve lock: bogus\n# target: CPython 3.11, Linux x86_64 (manylinux_2_34)\n{line}\n")
    return path


@pytest.mark.parametrize("installer", ["uv", "pip"])
@pytest.mark.parametrize(
    "line",
    [
        f"kimi-serve-no-such-package-here==0.0.1 --hash=sha256:{BOGUS_HASH}",  # not on any index
        f"six==1.17.0 --hash=sha256:{BOGUS_HASH}",  # a real package, a wrong hash
    ],
)
def test_failed_install_leaves_the_old_venv_byte_identical(cli, tmp_path, old_venv, installer, line, package_index):
    if installer == "uv" and find_uv() is None:
        pytest.skip("uv not installed (scripts/dev-venv.sh installs it into .venv)")
    before = _tree(old_venv)
    r = cli(
        "engine",
        "install",
        "--prefix",
        str(old_venv),
        "--lock",
        str(_bogus_lock(tmp_path, line)),
        "--installer",
        installer,
        "--no-patches",
        "--quiet",
    )
    assert r.code == 5, r.err
    assert r.err.startswith("kimi-serve: error: ") and r.err.count("\n") == 1 and "Traceback" not in r.err
    assert "previous venv is untouched" in r.err
    if line.startswith("six=="):  # a tampered hash: the message names the package and the cause
        assert "hash mismatch for six==1.17.0" in r.err
    assert _tree(old_venv) == before
    # no staging or old folder left behind (the install lock, an empty flock file, stays)
    assert sorted(p.name for p in old_venv.parent.iterdir()) == [".venv.kimi-serve.lock", "venv"]


def test_a_lock_file_that_is_not_text_is_a_usage_error_naming_it(cli, tmp_path, old_venv):
    lock = tmp_path / "binary.txt"
    lock.write_bytes(b"# kimi-serve lock\n" + bytes(range(128, 256)) * 8)
    before = _tree(old_venv)
    r = cli("engine", "install", "--prefix", str(old_venv), "--lock", str(lock), "--no-patches", "--quiet")
    assert r.code == 2, r.err
    assert r.err.count("\n") == 1 and "Traceback" not in r.err
    assert f"lock file {lock} is not UTF-8 text" in r.err and "fix:" in r.err
    assert _tree(old_venv) == before


def test_dry_run_shows_the_plan_and_changes_nothing(cli, tmp_path, old_venv):
    before = _tree(old_venv)
    r = cli("engine", "install", "--prefix", str(old_venv), "--lock", "cpu", "--dry-run")
    assert r.code == 0, r.err
    assert "would install the cpu lock" in r.out and "replace the existing venv" in r.out
    assert "sglang-0.5.23-sm120" in r.out and "nothing changed" in r.out
    fresh = tmp_path / "new" / "venv"
    r = cli("engine", "install", "--prefix", str(fresh), "--lock", "gpu", "--dry-run", "--json")
    plan = json.loads(r.out)["plan"]
    assert plan["lock"] == "gpu" and plan["sglang"] == locks.SGLANG_VERSION and not plan["replaces_existing"]
    assert plan["lock_sha256"] == hashlib.sha256(locks.lock_path("gpu").read_bytes()).hexdigest()
    assert _tree(old_venv) == before and not fresh.parent.exists()
    assert plan["interpreter"] == "copy" and plan["kimi_serve"] is True


def test_python_picks_the_base_interpreter_of_the_locks_version(cli, tmp_path):
    fresh = tmp_path / "new" / "venv"
    r = cli(
        "engine", "install", "--prefix", str(fresh), "--lock", "cpu", "--python", sys.executable, "--dry-run", "--json"
    )
    assert r.code == 0 and json.loads(r.out)["plan"]["python"] == sys.executable, r.err
    older = tmp_path / "python3.10"
    older.write_text("#!/bin/sh\necho 3.10\n")
    older.chmod(0o755)
    r = cli("engine", "install", "--prefix", str(fresh), "--lock", "cpu", "--python", str(older), "--dry-run")
    assert r.code == 2 and f"--python {older}: Python 3.10, the lock targets 3.11" in r.err, r.err
    assert "fix: pass a python3.11" in r.err and r.err.count("\n") <= 2
    r = cli(
        "engine", "install", "--prefix", str(fresh), "--lock", "cpu", "--python", str(tmp_path / "nope"), "--dry-run"
    )
    assert r.code == 2 and "does not run" in r.err, r.err
    assert not fresh.parent.exists()


def test_default_prefix_is_the_profiles_python_venv(cli):
    r = cli("engine", "install", "--dry-run", "--json")
    plan = json.loads(r.out)["plan"]
    assert plan["prefix"] == "/opt/kimi-serve/venv" and plan["patch_set"] == "sglang-0.5.23-sm120+sglang-0.5.23-kimi"
    r = cli("engine", "install", "--profile", "sim", "--dry-run")
    assert r.code == 2 and "sets no python:" in r.err and "--prefix" in r.err


def test_a_second_install_waits_for_no_one_and_exits_75(cli, tmp_path, _own_host_lock):
    """The lock of the venv being installed (a sibling of its prefix), not the host lock: held, 75; the host lock
    held (say, by an `up`), an install takes its own lock all the same."""
    with open(_own_host_lock, "w") as host:
        fcntl.flock(host, fcntl.LOCK_EX)
        with eng._venv_lock(make_plan(tmp_path / "w", "cpu", None, None)):
            assert (tmp_path / ".w.kimi-serve.lock").exists()
    with open(tmp_path / ".v.kimi-serve.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write('{"command": "engine install", "pid": 4242, "since": "2026-01-01T00:00:00+00:00"}')
        held.flush()
        r = cli("engine", "install", "--prefix", str(tmp_path / "v"), "--lock", "cpu", "--quiet")
    assert r.code == 75
    since = "since 2026-01-01T00:00:00+00:00"
    assert f"`kimi-serve engine install` (pid 4242, {since}) is installing {tmp_path / 'v'}" in r.err
    assert not (tmp_path / "v").exists()


def test_refuses_to_replace_a_folder_that_is_not_a_venv(cli, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "precious").write_text("x")
    r = cli("engine", "install", "--prefix", str(tmp_path / "data"), "--lock", "cpu", "--dry-run")
    assert r.code == 2 and "is not a venv" in r.err


def test_unknown_lock_and_missing_venv_are_one_line_errors(cli, tmp_path):
    r = cli("engine", "install", "--prefix", str(tmp_path / "v"), "--lock", "tpu", "--dry-run")
    assert r.code == 2 and "unknown lock 'tpu'" in r.err and "(fix: " in r.err
    r = cli("engine", "status", "--prefix", str(tmp_path / "nothing"))
    assert r.code == 5 and "is not an engine venv" in r.err and "engine install" in r.err


def test_a_killed_install_is_recovered_by_the_next(tmp_path, old_venv):
    plan = make_plan(old_venv, "cpu", None, None)
    before = _tree(old_venv)
    os.rename(old_venv, plan.old)  # killed between the two renames
    plan.staging.mkdir()  # with a half-built staging folder
    clear_leftovers(plan.prefix)
    assert _tree(old_venv) == before and not plan.staging.exists() and not plan.old.exists()


# ------------------------------------------------------------------------------------------- real installs (slow)


@pytest.fixture(scope="module")
def cpu_engine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CPU lock installed by `engine install` into a temp prefix, patched with prod's patch set."""
    if find_uv() is None:
        pytest.skip("uv not installed (scripts/dev-venv.sh installs it into .venv)")
    root = tmp_path_factory.mktemp("engine")
    prefix = root / "venv"
    env = dict(os.environ, KIMI_SERVE_STATE_DIR=str(root / "state"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kimi_serve",
            "engine",
            "install",
            "--lock",
            "cpu",
            "--prefix",
            str(prefix),
            "--quiet",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    return prefix


def test_install_builds_records_and_patches_the_cpu_engine(cli, cpu_engine):
    record = json.loads((cpu_engine / RECORD_NAME).read_text())
    lock = locks.load("cpu")
    assert record["lock"] == "cpu" and record["lock_sha256"] == lock.sha256
    assert record["lock_input_sha256"] == lock.input_sha256 and record["packages"] == len(lock.pins)
    assert record["versions"]["sglang"] == locks.SGLANG_VERSION and record["versions"]["torch"] == "2.14.1"
    assert record["patch_set"] == "sglang-0.5.23-sm120+sglang-0.5.23-kimi" and len(record["patches"]) >= 9
    # relocated: nothing names the staging folder
    for p in (cpu_engine / "bin").iterdir():
        if p.is_file() and not p.is_symlink():
            assert b"kimi-serve-new" not in p.read_bytes(), p
    r = cli("engine", "status", "--prefix", str(cpu_engine), "--json")
    st = json.loads(r.out)
    assert r.code == 0, st["findings"]
    assert st["patch_state"] == "applied" and st["drift"] == [] and st["dependency_conflicts"] == []
    assert "flashinfer-python" in st["omitted_by_lock"]
    done = subprocess.run(
        [str(cpu_engine / "bin" / "python"), "-c", "import sglang.bench_serving, sglang.srt"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_engine_depends_on_nothing_outside_its_prefix(cli, cpu_engine):
    """A standalone interpreter and kimi-serve itself inside the prefix (docs/systemd.md "Supported layout"): every
    link in bin/ stays inside, and the engine imports SGLang and runs its own kimi-serve with the base interpreter's
    installation hidden, as the unit's sandbox hides /root and /home."""
    record = json.loads((cpu_engine / RECORD_NAME).read_text())
    assert record["interpreter"]["kind"] == "copy" and (cpu_engine / record["interpreter"]["path"]).is_file()
    assert record["kimi_serve"]["script"] == "bin/kimi-serve"
    for link in (cpu_engine / "bin").iterdir():
        if link.is_symlink():
            assert not os.path.isabs(os.readlink(link)), link  # relative: the prefix can be renamed into place
            assert link.resolve().is_relative_to(cpu_engine), link
    assert (cpu_engine / "pyvenv.cfg").read_text().splitlines()[0] == f"home = {cpu_engine / 'python' / 'bin'}"
    shown = cli("engine", "status", "--prefix", str(cpu_engine)).out
    assert (
        f"interpreter: {cpu_engine / record['interpreter']['path']} (a copy of {record['interpreter']['base']})"
        in shown
    )
    assert f"kimi-serve {record['kimi_serve']['version']}: this one" in shown, shown
    base = Path(record["interpreter"]["base"]).resolve().parent.parent
    code = "import kimi_serve, sglang.srt.function_call.kimik2_detector; print(kimi_serve.__file__)"
    script = [f"{cpu_engine}/bin/python -I -c '{code}'", f"{cpu_engine}/bin/kimi-serve --help >/dev/null && echo ok"]
    if os.geteuid() == 0 and str(base) not in ("/usr", "/usr/local"):
        script.insert(0, f"mount -t tmpfs none {base}")  # the base installation hidden (the unit's ProtectHome)
        argv = ["unshare", "-m", "sh", "-ec", "; ".join(script)]
    else:
        argv = ["sh", "-ec", "; ".join(script)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    own_file, ok = done.stdout.split()
    assert Path(own_file).is_relative_to(cpu_engine) and ok == "ok", done.stdout


def test_status_reports_drift_after_a_hand_change(cli, cpu_engine):
    uv = find_uv()
    subprocess.run(
        [
            uv,
            "pip",
            "install",
            "--quiet",
            "--python",
            str(cpu_engine / "bin" / "python"),
            *locks.INDEX_OPTIONS,
            "six==1.16.0",
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    r = cli("engine", "status", "--prefix", str(cpu_engine))
    assert r.code == 1
    assert "six: changed (lock 1.17.0, installed 1.16.0)" in r.out
    assert f"fix: kimi-serve engine install --prefix {cpu_engine} --lock cpu" in r.out
    st = json.loads(cli("engine", "status", "--prefix", str(cpu_engine), "--json").out)
    assert {"name": "six", "kind": "changed", "locked": "1.17.0", "installed": "1.16.0"} in st["drift"]
