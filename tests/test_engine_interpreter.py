"""The engine's standalone interpreter (kimi_serve/engine/interpreter.py, elf.py) and kimi-serve's own copy in the
engine (engine/own.py), on this machine's real interpreters: a copy that runs with its original installation hidden,
an ELF search path rewritten in place (a real binary built by gcc), the checks that refuse a copy that still leans on
the original, and the unit's start gate taken from the engine. A whole `engine install` with them: tests/test_engine.py
(the engine tier).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kimi_serve.core.errors import KimiServeError
from kimi_serve.engine import elf, interpreter, own
from kimi_serve.service.unit import UnitContext

LONG = "/opt/a/rather/long/prefix/that/was/built/here/lib"


def _binary(tmp_path: Path, dtags: str, rpath: str = LONG) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed (apt-get install gcc)")
    src = tmp_path / "prog.c"
    src.write_text("int main(void) { return 7; }\n")
    exe = tmp_path / f"prog-{dtags}"
    subprocess.run(["gcc", "-o", str(exe), str(src), f"-Wl,{dtags},-rpath,{rpath}"], check=True, capture_output=True)
    return exe


@pytest.mark.parametrize("dtags, tag", [("--enable-new-dtags", "RUNPATH"), ("--disable-new-dtags", "RPATH")])
def test_a_search_path_is_read_and_rewritten_in_place(tmp_path: Path, dtags: str, tag: str) -> None:
    exe = _binary(tmp_path, dtags)
    size = exe.stat().st_size
    [entry] = elf.search_paths(exe.read_bytes())
    assert (entry.tag, entry.value) == (tag, LONG)
    assert "libc.so.6" in elf.needed(exe.read_bytes())
    assert elf.set_search_path(exe, interpreter.ORIGIN_LIB) == [LONG]
    assert [e.value for e in elf.search_paths(exe.read_bytes())] == [interpreter.ORIGIN_LIB]
    shown = subprocess.run(["readelf", "-d", str(exe)], capture_output=True, text=True, check=True).stdout
    assert f"Library {tag.lower()}: [{interpreter.ORIGIN_LIB}]" in shown, shown  # binutils reads what was written
    assert exe.stat().st_size == size and subprocess.run([str(exe)]).returncode == 7  # nothing moved: it still runs
    with pytest.raises(elf.ElfError, match="longer"):
        elf.set_search_path(exe, "/x" * 40)


def test_only_the_search_path_into_the_original_installation_is_pointed_at_the_copy(tmp_path: Path) -> None:
    exe = _binary(tmp_path, "--enable-new-dtags", "/opt/base/3.11/lib:/opt/private-ssl/lib")
    base = interpreter.Base(
        executable=Path("/opt/base/3.11/bin/python3.11"), prefix=Path("/opt/base/3.11"), version="3.11",
        stdlib=Path("/opt/base/3.11/lib/python3.11"), platstdlib=Path("/opt/base/3.11/lib/python3.11"),
        include=Path("/opt/base/3.11/include/python3.11"), shared=True, library=None,
    )  # fmt: skip
    interpreter._own_search_path(exe, base)
    assert [e.value for e in elf.search_paths(exe.read_bytes())] == [f"{interpreter.ORIGIN_LIB}:/opt/private-ssl/lib"]
    interpreter._own_search_path(exe, base)  # already the copy's: unchanged
    assert [e.value for e in elf.search_paths(exe.read_bytes())] == [f"{interpreter.ORIGIN_LIB}:/opt/private-ssl/lib"]


def test_what_is_not_a_64_bit_elf_is_refused() -> None:
    with pytest.raises(elf.ElfError, match="not an ELF"):
        elf.search_paths(b"#!/bin/sh\necho hi\n")
    with pytest.raises(elf.ElfError, match="64-bit"):
        elf.search_paths(b"\x7fELF\x01\x01" + b"\0" * 60)


@pytest.fixture(scope="module")
def copied(tmp_path_factory: pytest.TempPathFactory) -> tuple[interpreter.Base, Path]:
    """This suite's own base interpreter, copied once for the module."""
    base = interpreter.describe(sys.executable)
    exe = interpreter.copy(base, tmp_path_factory.mktemp("interp") / interpreter.DIR)
    return base, exe


def test_the_copy_runs_from_its_own_prefix_with_the_original_hidden(copied: tuple[interpreter.Base, Path]) -> None:
    base, exe = copied
    interpreter.check(exe, base)  # its own prefix, nothing of the original mapped
    prefix = exe.parent.parent
    assert not (prefix / "lib" / f"python{base.version}" / "test").exists()
    assert not any((prefix / "lib" / f"python{base.version}" / "site-packages").iterdir())
    for entry in elf.search_paths(exe.read_bytes()):  # no search path out of the copy
        assert entry.value.startswith("$ORIGIN"), entry
    if os.geteuid() != 0 or shutil.which("unshare") is None or str(base.prefix) in interpreter.SYSTEM_PREFIXES:
        return  # the original cannot be hidden here (or is the system's own /usr): check() above is the proof
    # what the unit's sandbox does to /root and /home: the original installation gone from view
    code = "import ssl, sqlite3, ctypes, json, sys; print(sys.prefix)"
    hidden = subprocess.run(
        ["unshare", "-m", "sh", "-c", 'mount -t tmpfs none "$1" && "$2" -I -c "$3"; "$4" -c 1 2>/dev/null; echo "$?"',
         "sh", str(base.prefix), str(exe), code, str(base.executable)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert hidden.stdout.split() == [str(prefix), "127"], hidden.stdout + hidden.stderr


def test_a_copy_that_loads_a_libpython_other_than_its_own_is_refused(
    copied: tuple[interpreter.Base, Path], tmp_path: Path
) -> None:
    base, exe = copied
    if not base.shared:
        pytest.skip(f"{base.executable} links libpython statically: there is no library to lose")
    broken = tmp_path / "python"
    shutil.copytree(exe.parent.parent, broken, symlinks=True)
    for lib in (broken / "lib").glob("libpython*"):
        lib.unlink()
    with pytest.raises(KimiServeError) as err:
        interpreter.check(broken / "bin" / exe.name, base)
    assert err.value.exit_code == 5 and "the previous venv is untouched" in err.value.message


def test_a_copy_that_loads_a_library_the_unit_never_sees_is_refused(
    copied: tuple[interpreter.Base, Path], tmp_path: Path
) -> None:
    """A search path kept outside the original installation (a private lib dir) that lies under /tmp (or /root,
    /home): the copy runs for root here, but the unit's PrivateTmp/ProtectHome hide it. Refused, naming the file."""
    base, exe = copied
    if not base.shared:
        pytest.skip(f"{base.executable} links libpython statically: no library to move")
    private = Path(tempfile.mkdtemp(prefix="k", dir="/tmp"))  # short: the search path is rewritten in place
    try:
        broken = tmp_path / "python"
        shutil.copytree(exe.parent.parent, broken, symlinks=True)
        for lib in (broken / "lib").glob("libpython*"):
            shutil.move(str(lib), private / lib.name)
        copy = broken / "bin" / exe.name
        if any(len(str(private)) > e.size for e in elf.search_paths(copy.read_bytes())):
            pytest.skip("the copy's search path has no room for the private directory's path")
        elf.set_search_path(copy, str(private))
        with pytest.raises(KimiServeError) as err:
            interpreter.check(copy, base)
        message = err.value.one_line()
        assert err.value.exit_code == 5 and f"loads {private}/libpython" in message, message
        assert "PrivateTmp=yes gives the unit an empty /tmp" in message and f"move {private} outside" in message
    finally:
        shutil.rmtree(private)


def test_a_copy_without_its_standard_library_is_refused(copied: tuple[interpreter.Base, Path], tmp_path: Path) -> None:
    base, exe = copied
    broken = tmp_path / "python"
    (broken / "bin").mkdir(parents=True)
    shutil.copy2(exe, broken / "bin" / exe.name)
    if base.shared:
        shutil.copytree(exe.parent.parent / "lib", broken / "lib", ignore=shutil.ignore_patterns("python3*"))
    with pytest.raises(KimiServeError) as err:
        interpreter.check(broken / "bin" / exe.name, base)
    assert err.value.exit_code == 5, err.value.message


def test_kimi_serve_in_an_engine_venv_is_what_the_unit_runs(cli, tmp_path: Path) -> None:
    venv = tmp_path / "engine"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next(venv.glob("lib/python*/site-packages"))
    info = own.install_self(venv, site)
    assert info["script"] == "bin/kimi-serve" and (site / "kimi_serve" / "cli.py").is_file()
    assert not list((site / "kimi_serve").rglob("__pycache__"))  # the install compiles the venv afterwards
    assert (site / "kimi_serve" / "_data" / "configs" / "prod.yaml").is_file()  # what the code reads, links resolved
    dist = next(site.glob("kimi_serve-*.dist-info"))
    for line in (dist / "RECORD").read_text().splitlines():  # every file listed with its real hash and size
        name, digest, size = line.split(",")
        if digest:
            data = (site / name).read_bytes()
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, int(size)) == (f"sha256={want}", len(data)), name
    script = venv / "bin" / "kimi-serve"
    assert script.read_text().splitlines()[0] == f"#!{venv / 'bin' / 'python'}" and os.access(script, os.X_OK)
    assert f"Version: {info['version']}" in (dist / "METADATA").read_text().splitlines()

    elsewhere = UnitContext(kimi_serve="/home/op/.venv/bin/kimi-serve", package_root="/home/op/src")
    ctx = elsewhere.for_engine(str(venv / "bin" / "python"))
    assert (ctx.kimi_serve, ctx.package_root) == (str(script), str(site))
    assert elsewhere.for_engine(sys.executable) is elsewhere  # a venv kimi-serve was not installed into by the engine

    assert own.stale(site) is None and ctx.engine_drift() is None  # the copy is this kimi-serve

    # kimi-serve changed since (an upgrade, a fix): the unit would run the engine's old copy, and every path says so
    (site / "kimi_serve" / "cli.py").write_text((site / "kimi_serve" / "cli.py").read_text() + "# the old copy\n")
    assert "is not this one" in str(own.stale(site))
    drift = ctx.engine_drift()
    assert drift is not None and (drift.code, drift.status) == ("unit.kimi_serve", "warn")
    assert drift.fix.startswith(f"kimi-serve engine install --prefix {venv}"), drift.fix
    profile = tmp_path / "p.yaml"
    profile.write_text(f"extends: sim\npython: {venv / 'bin' / 'python'}\nservice:\n  user: root\n")
    done = cli("install-service", "--profile", str(profile), "--root", str(tmp_path / "root"), "--dry-run", "--json")
    found = {f["code"]: f for f in json.loads(done.out)["findings"]}
    assert found["unit.kimi_serve"]["status"] == "warn", done.out
    unit = json.loads(done.out)["unit_text"]
    assert f'ExecStartPost="{script}" "verify"' in unit  # the engine's gate all the same: the warning says to update

    # a venv without kimi-serve's dependencies (a lock that lost one): refused, naming what is missing
    with pytest.raises(KimiServeError) as err:
        own.check_self(venv / "bin" / "python")
    assert err.value.exit_code == 5 and "No module named" in err.value.message, err.value.message
