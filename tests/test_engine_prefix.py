"""`engine install` over a prefix that is a symbolic link, what an earlier install left next to a prefix, and what
`engine status` says about it (kimi_serve/engine/prefix.py).

Real installs, kept fast: a lock of one tiny wheel built here, served from a local folder (``--no-index
--find-links`` in the lock, as uv reads a requirements file), with ``--interpreter link --no-kimi-serve
--no-patches``: uv makes the venv and installs it offline in well under a second.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import venv
import zipfile
from pathlib import Path

import pytest
from zygote import shared

from kimi_serve.engine.discover import find_uv

RECORD_NAME = "kimi-serve-engine.json"

WHEEL = "kimi_tiny-1.0-py3-none-any.whl"


def _wheel(folder: Path) -> Path:
    files = {
        "kimi_tiny/__init__.py": b"X = 1\n",
        "kimi_tiny-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: kimi-tiny\nVersion: 1.0\n",
        "kimi_tiny-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()},{len(b)}"
        for p, b in files.items()
    ]
    files["kimi_tiny-1.0.dist-info/RECORD"] = ("\n".join([*record, "kimi_tiny-1.0.dist-info/RECORD,,"]) + "\n").encode()
    folder.mkdir()
    with zipfile.ZipFile(folder / WHEEL, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
    return folder / WHEEL


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The options of a real, offline engine install of one tiny package (uv, its cache under tmp_path)."""
    if find_uv() is None:
        pytest.skip("uv not installed (scripts/dev-venv.sh installs it into .venv)")
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    wheel = _wheel(tmp_path / "wheels")
    lock = tmp_path / "tiny.txt"
    lock.write_text(
        "# kimi-serve lock: tiny\n# target: CPython 3.11, Linux x86_64 (manylinux_2_34)\n"
        f"--no-index\n--find-links {wheel.parent}\n"
        f"kimi-tiny==1.0 --hash=sha256:{hashlib.sha256(wheel.read_bytes()).hexdigest()}\n"
    )
    opts = ["--lock", str(lock), "--no-patches", "--installer", "uv", "--interpreter", "link", "--no-kimi-serve"]
    return [*opts, "--quiet"]


def old_of(prefix: Path) -> Path:
    return prefix.parent / f".{prefix.name}.kimi-serve-old"


def staging_of(prefix: Path) -> Path:
    return prefix.parent / f".{prefix.name}.kimi-serve-new"


def _listing(folder: Path) -> list[str]:
    return sorted(p.name + (" -> " + os.readlink(p) if p.is_symlink() else "") for p in folder.iterdir())


@pytest.mark.parametrize("target", ["a venv", "nothing yet"])
def test_an_install_over_a_link_builds_where_it_points_and_keeps_the_link(cli, tmp_path, tiny, target) -> None:
    """Before: the link was renamed aside and a venv put in its place (the next install then exited 70), or, the
    link dangling, the swap failed with exit 70."""
    real = tmp_path / "engines" / "v1"
    if target == "a venv":
        venv.create(real, with_pip=False)
    else:
        real.parent.mkdir()
    (tmp_path / "opt").mkdir()
    link = tmp_path / "opt" / "venv"
    link.symlink_to(real)
    for _ in range(2):  # and again over it: nothing wedged
        r = cli("engine", "install", "--prefix", str(link), *tiny)
        assert r.code == 0, r.err
        assert f"into {real} (the link {link} points there)" in r.out
        assert link.is_symlink() and os.readlink(link) == str(real)
        assert _listing(link.parent) == ["venv -> " + str(real)]  # nothing renamed or left beside the link
        assert _listing(real.parent) == [".v1.kimi-serve.lock", "v1"]  # the lock and the swap happen at the target
        assert (real / "lib" / "python3.11" / "site-packages" / "kimi_tiny").is_dir()
    record = json.loads((real / RECORD_NAME).read_text())
    assert record["prefix"] == str(real) and record["link"] == str(link)


def test_a_link_moved_aside_by_an_older_kimi_serve_is_reported_with_its_fix(cli, tmp_path, tiny) -> None:
    """An older install over a link renamed the link itself aside and put its venv in its place; every install after
    it exited 70 ("Cannot call rmtree on a symbolic link") while `engine status` said OK. Now both name the link
    and the fix (exit 5, nothing touched), and the fix works."""
    real = tmp_path / "engines" / "v1"
    venv.create(real, with_pip=False)
    prefix = tmp_path / "opt" / "venv"
    r = cli("engine", "install", "--prefix", str(prefix), *tiny)  # the venv the older install left in its place
    assert r.code == 0, r.err
    old_of(prefix).symlink_to(real)
    before = _listing(prefix.parent)
    for argv in (["install", "--prefix", str(prefix), *tiny], ["status", "--prefix", str(prefix)]):
        r = cli("engine", *argv)
        assert r.code == 5, (argv, r.out, r.err)
        assert r.err.count("\n") == 1 and "Traceback" not in r.err
        assert f"an older kimi-serve replaced the link {prefix} -> {real} with a new venv" in r.err
        assert f"(fix: keep the new venv: rm {old_of(prefix)}; or go back to the link: " in r.err
        assert _listing(prefix.parent) == before and (real / "pyvenv.cfg").is_file()
    old_of(prefix).unlink()  # the fix (keep the new venv)
    r = cli("engine", "install", "--prefix", str(prefix), *tiny)
    assert r.code == 0, r.err
    # killed between the older install's renames: the link aside, nothing at the prefix
    prefix.rename(tmp_path / "elsewhere")
    old_of(prefix).symlink_to(real)
    r = cli("engine", "install", "--prefix", str(prefix), *tiny)
    assert r.code == 5 and f"(fix: put the link back: mv {old_of(prefix)} {prefix}, then run" in r.err, r.err
    assert not os.path.lexists(prefix)


def test_status_after_a_kill_between_the_renames_says_so_with_the_installs_own_options(cli, tmp_path, tiny) -> None:
    """Before: "not an engine venv (no bin/python)" with a fix that dropped --lock (and every other option)."""
    prefix = tmp_path / "opt" / "venv"
    r = cli("engine", "install", "--prefix", str(prefix), *tiny)
    assert r.code == 0, r.err
    trace = tmp_path / "trace"
    env = {**os.environ, "KIMI_SERVE_TEST_HOOK": f"trace-to={trace},kill-at=2"}
    done = shared().run(["engine", "install", "--prefix", str(prefix), *tiny], env=env)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert trace.read_text().splitlines()[-1] == "2 engine.swap"  # between `prefix -> old` and `staging -> prefix`
    assert not prefix.exists() and old_of(prefix).is_dir() and staging_of(prefix).is_dir()
    r = cli("engine", "status", "--prefix", str(prefix))
    assert r.code == 5 and r.err.count("\n") == 1, r.err
    assert f"{prefix}: an engine install was interrupted between its two renames" in r.err
    assert f"the previous venv is at {old_of(prefix)}" in r.err
    fix = r.err.rsplit("(fix: ", 1)[1].removesuffix(")\n")
    assert fix == f"kimi-serve engine install --prefix {prefix} " + " ".join(tiny[:-1]), r.err
    r = cli(*fix.split()[1:])  # the fix, as given, completes it
    assert r.code == 0, r.err
    assert _listing(prefix.parent) == [".venv.kimi-serve.lock", "venv"]
    assert json.loads((prefix / RECORD_NAME).read_text())["options"] == tiny[:-1]


@pytest.mark.parametrize(
    ("prefix", "how"),
    [
        ("{state}", "is"),  # a profile's python: $STATE/bin/python
        ("{state}/engine", "sits inside"),
        ("{state_parent}", "contains"),
        ("{link}", "resolves to"),  # a link that leads to the state root
        ("/etc", "contains"),  # /etc/kimi-serve, /etc/systemd
    ],
)
def test_kimi_serves_own_folders_are_never_an_engine_prefix(
    cli, tmp_path, write_profile, prefix: str, how: str
) -> None:
    """The next install would clear every lock, record and backup there (exit 0 before): exit 2 with the reason,
    before anything is read, replaced or deleted."""
    from kimi_serve.core.settings import state_root

    state = state_root()
    for name in ("root-x.lock", "last-good.json", ".venv.kimi-serve-old"):
        (state / name).mkdir() if name.startswith(".") else (state / name).write_text("kept\n")
    link = tmp_path / "engine-link"
    link.symlink_to(state)
    given = prefix.format(state=state, state_parent=state.parent, link=link)
    before = _listing(state)
    profile = write_profile(f"extends: sim\npython: {given}/bin/python\n", name="own")
    for args in (["--prefix", given], ["--profile", str(profile)]):
        r = cli("engine", "install", *args, "--no-patches", "--no-kimi-serve")
        assert r.code == 2, (args, r.code, r.out, r.err)
        line = r.err.strip()
        assert len(line.splitlines()) == 1 and "Traceback" not in r.err, r.err
        assert "engine prefix" in line and how in line and "fix:" in line, line
        assert _listing(state) == before


@pytest.mark.parametrize(
    ("prefix", "how"),
    [
        ("/etc/kimi-serve", "is"),
        ("/etc/kimi-serve/venv", "sits inside"),
        ("/etc/systemd/system/venv", "sits inside"),
        ("/usr/lib/systemd", "is"),
        ("/var/lib/kimi-serve/venv", "sits inside"),  # the default state root, whatever $KIMI_SERVE_STATE_DIR says
        ("/var/lib", "contains"),
    ],
)
def test_the_key_and_unit_folders_are_never_an_engine_prefix(prefix: str, how: str) -> None:
    """The host's own folders, judged without touching them (the guard alone: an install there would write /etc)."""
    from kimi_serve.core.errors import KimiServeError
    from kimi_serve.engine.prefix import refuse_kimi_serves_own

    with pytest.raises(KimiServeError) as err:
        refuse_kimi_serves_own(Path(prefix), Path(prefix))
    assert err.value.exit_code == 2 and how in err.value.one_line(), err.value.one_line()
    refuse_kimi_serves_own(Path("/opt/kimi-serve/venv"), Path("/opt/kimi-serve/venv"))  # prod's: its own folder
