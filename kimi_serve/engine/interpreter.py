"""A standalone interpreter for the engine venv: a copy of the base interpreter's installation inside the prefix.

A venv's ``bin/python`` links to the interpreter it was made from; under ``/root`` or ``/home`` (pyenv, a user's
build) the unit's user cannot run it (``ProtectHome=``, ``/root`` is 0700: docs/systemd.md), and the unit fails with
203/EXEC. The copy (``PREFIX/python``: the executable, its libpython, the standard library without site-packages and
the test suite, the C headers run-time kernels include) depends on nothing outside the prefix. A shared build's search
path is rewritten to ``$ORIGIN/../lib`` (:mod:`kimi_serve.engine.elf`); the copy is then run and must report its own
prefix and map no file of the original installation, or the install stops with the previous venv untouched.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimi_serve.core import proc
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.settings import process_environ
from kimi_serve.engine import elf
from kimi_serve.host.unit_reach import sandbox_hides

DIR = "python"  # the copy's folder inside the engine prefix
ORIGIN_LIB = "$ORIGIN/../lib"
# stdlib parts no server imports: left out of the copy (about 125 MB of pyenv's 250)
SKIP = frozenset({"site-packages", "dist-packages", "test", "idlelib", "turtledemo"})
SYSTEM_PREFIXES = ("/usr", "/usr/local")
UNTOUCHED = "the previous venv is untouched"  # what every failure before the swap says
LINK_HINT = (
    "pass --python PATH, a Python of the lock's version outside /root and /home (e.g. /usr/bin/python3.11), "
    "with --interpreter link"
)  # a distribution's interpreter: its prefix holds other software too
_DESCRIBE = (
    "import json, os, sys, sysconfig as s; v = s.get_config_var; print(json.dumps({"
    "'executable': os.path.realpath(sys.executable), 'prefix': sys.base_prefix, "
    "'version': '%d.%d' % sys.version_info[:2], 'stdlib': s.get_path('stdlib'), "
    "'platstdlib': s.get_path('platstdlib'), 'include': s.get_path('include'), "
    "'shared': bool(v('Py_ENABLE_SHARED')), 'libdir': v('LIBDIR') or '', 'ldlibrary': v('LDLIBRARY') or ''}))"
)
# what the copy runs to prove itself: the compiled stdlib modules a server loads, then every file it mapped
_MODULES = "ssl sqlite3 ctypes lzma bz2 zlib hashlib _decimal uuid select mmap multiprocessing asyncio readline"
_CHECK = (
    "import importlib, json, sys\n"
    f"for name in {_MODULES.split()!r}:\n"
    "    try:\n        importlib.import_module(name)\n    except ImportError:\n        pass\n"
    "maps = sorted({l.split(None, 5)[5].strip() for l in open('/proc/self/maps') if len(l.split(None, 5)) == 6})\n"
    "print(json.dumps({'prefix': sys.prefix, 'maps': [m for m in maps if m.startswith('/')]}))"
)


@dataclass(frozen=True)
class Base:
    """The interpreter a copy is made of, as it describes itself."""

    executable: Path
    prefix: Path
    version: str  # X.Y
    stdlib: Path
    platstdlib: Path
    include: Path
    shared: bool
    library: Path | None  # the shared libpython, when the build is shared

    @property
    def own_paths(self) -> tuple[Path, ...]:
        """Files of the original installation that a working copy never maps: its whole prefix, unless that is a
        distribution's /usr (whose lib/ holds the system libraries every interpreter loads), then its stdlib and
        libpython only."""
        if str(self.prefix) not in SYSTEM_PREFIXES:
            return (self.prefix,)
        return tuple(p for p in (self.stdlib, self.platstdlib, self.library, self.executable) if p is not None)


def env_error(message: str, hint: str = LINK_HINT) -> KimiServeError:
    """Exit 5: what the host (or the venv being built) lacks."""
    return KimiServeError(message, hint=hint, exit_code=ExitCode.ENVIRONMENT)


def last_line(text: str) -> str:
    return (text.strip().splitlines() or ["no output"])[-1]


def python_json(python: str, code: str, *, cannot: str, hint: str) -> Any:
    """Run ``code`` in ``python`` (isolated: -I) and read the JSON it prints last; exit 5 "PYTHON cannot CANNOT: the
    last line of its error" otherwise."""
    done = proc.run([python, "-I", "-c", code], timeout=60)
    if done.rc != 0:
        raise env_error(f"{python} cannot {cannot}: {last_line(done.err)}", hint)
    return json.loads(done.out.strip().splitlines()[-1])


def describe(python: str) -> Base:
    d: dict[str, Any] = python_json(
        python, _DESCRIBE, cannot="describe itself", hint="pass --python PATH: a working Python of the lock's version"
    )
    paths = {k: Path(d[k]) for k in ("executable", "prefix", "stdlib", "platstdlib", "include")}
    library = Path(d["libdir"]) / d["ldlibrary"] if d["shared"] and d["libdir"] and d["ldlibrary"] else None
    try:  # what the executable itself links: Debian builds libpython too, but links its python statically
        shared = any(n.startswith("libpython") for n in elf.needed(paths["executable"].read_bytes()))
    except (OSError, elf.ElfError):
        shared = bool(d["shared"])
    library = library.resolve() if shared and library and library.exists() else None
    return Base(**paths, version=d["version"], shared=shared, library=library)


def _copytree(src: Path, dest: Path) -> None:
    # links resolved (the copy must not point back into the original), dangling ones (Debian's sitecustomize) left out
    ignore = shutil.ignore_patterns(*SKIP)
    shutil.copytree(src, dest, ignore=ignore, symlinks=False, ignore_dangling_symlinks=True, dirs_exist_ok=True)


def copy(base: Base, dest: Path) -> Path:
    """Copy ``base`` into ``dest`` (a new folder) and make it load its own files; returns the copy's executable."""
    lib = dest / "lib"
    (dest / "bin").mkdir(parents=True)
    lib.mkdir()
    exe = dest / "bin" / f"python{base.version}"
    shutil.copy2(base.executable, exe)
    for stdlib in dict.fromkeys((base.stdlib, base.platstdlib)):
        _copytree(stdlib, lib / f"python{base.version}")
    (lib / f"python{base.version}" / "site-packages").mkdir(exist_ok=True)
    if base.include.is_dir():
        _copytree(base.include, dest / "include" / base.include.name)
    if base.library is not None:
        for sibling in base.library.parent.glob(f"libpython{base.version}*.so*"):  # the soname and its links
            shutil.copy2(sibling, lib / sibling.name, follow_symlinks=True)
    _own_search_path(exe, base)
    for alias in ("python3", "python"):
        (dest / "bin" / alias).symlink_to(exe.name)
    return exe


def _own_search_path(exe: Path, base: Base) -> None:
    """Point the library search path's entries inside the original installation at the copy's own lib/ (a relative
    entry already is one); entries elsewhere (a private OpenSSL under /opt) stay."""
    try:
        entries = elf.search_paths(exe.read_bytes())
        parts = [part for e in entries for part in e.value.split(":") if part]
        if any(not part.startswith("$ORIGIN") and Path(part).is_relative_to(base.prefix) for part in parts):
            kept = [p for p in parts if not p.startswith("$ORIGIN") and not Path(p).is_relative_to(base.prefix)]
            elf.set_search_path(exe, ":".join(dict.fromkeys([ORIGIN_LIB, *kept])))
    except elf.ElfError as exc:
        if base.shared:
            raise env_error(
                f"cannot point the copied interpreter at its own libpython ({exc}); the previous venv is untouched"
            ) from exc


def check(exe: Path, base: Base) -> None:
    """Run the copy: its own prefix, no file of the original installation mapped, nothing the unit's sandbox hides
    (a library under /root, /home or /tmp that a kept search path finds), its own libpython (exit 5 naming the
    file)."""
    env = {k: v for k, v in process_environ().items() if not k.startswith(("PYTHON", "LD_"))}
    done = proc.run([str(exe), "-I", "-c", _CHECK], timeout=120, env=env)
    if done.rc != 0:
        raise env_error(f"the copied interpreter {exe} does not run: {last_line(done.err)}; {UNTOUCHED}")
    seen = json.loads(done.out.strip().splitlines()[-1])
    prefix = exe.parent.parent
    if Path(seen["prefix"]) != prefix:
        raise env_error(f"the copied interpreter {exe} takes its standard library from {seen['prefix']}, not {prefix}")
    own = [str(p) for p in base.own_paths]
    leaked = [m for m in seen["maps"] if any(m == o or m.startswith(o.rstrip("/") + "/") for o in own)]
    if leaked:
        raise env_error(
            f"the copied interpreter still loads {leaked[0]} from its original installation: the unit's user may "
            f"not reach it; {UNTOUCHED}"
        )
    hidden = [(m, why) for m in seen["maps"] if not Path(m).is_relative_to(prefix) and (why := sandbox_hides(m))]
    if hidden:
        path, why = hidden[0]
        raise env_error(
            f"the copied interpreter loads {path}, which the unit never sees ({why}): the unit could not start; "
            f"{UNTOUCHED}",
            f"move {Path(path).parent} outside /root, /home and /tmp (and the search path that names it: "
            f"RUNPATH, ld.so.conf), or {LINK_HINT}",
        )
    if base.shared and not any(
        Path(m).name.startswith("libpython") and Path(m).is_relative_to(prefix) for m in seen["maps"]
    ):
        libs = [m for m in seen["maps"] if Path(m).name.startswith("libpython")]
        raise env_error(
            f"the copied interpreter {exe} does not load its own libpython from {prefix / 'lib'} (it loads "
            f"{libs[0] if libs else 'none'}); {UNTOUCHED}"
        )
