"""kimi-serve itself inside the engine venv, so the unit's start gate (``ExecStartPost=kimi-serve verify``), its
monitoring check and the simulator run from the engine prefix alone, not from the operator's kimi-serve (which the
unit's sandbox may hide; docs/systemd.md "Supported layout").

The package is copied as the running kimi-serve has it, with a ``.dist-info`` of its own (a RECORD, so pip or uv can
uninstall it) and ``bin/kimi-serve``. Its dependencies come from the engine lock (the ``.in`` files name them), and
the install checks that the copy imports with exactly the lock's packages.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.metadata
import os
import shutil
from pathlib import Path

from kimi_serve import __version__
from kimi_serve.core import proc
from kimi_serve.core.resources import package_root
from kimi_serve.engine.interpreter import UNTOUCHED, env_error, last_line

DIST = "kimi-serve"
SCRIPT = "kimi-serve"
ENTRY = "kimi_serve.cli:entry"
INSTALLER = "kimi-serve engine install"
# the modules kimi-serve's commands import (its declared runtime), checked inside the engine after the copy
_IMPORTS = "import kimi_serve.cli, kimi_serve.verify, typer, yaml, jinja2, jsonschema; print('ok')"


def digest(package: Path) -> str:
    """sha256 over the package's files (relative path and bytes, bytecode left out): equal for a copy and its source,
    different once either changes, also within one version number."""
    files = []
    for top, dirs, names in os.walk(package, followlinks=True):  # the source's _data/ links are copied as folders
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        files += [Path(top) / n for n in names if not n.endswith(".pyc")]
    h = hashlib.sha256()
    for path in sorted(files, key=lambda f: f.relative_to(package).as_posix()):
        h.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


@functools.cache
def _running() -> str:
    """The running kimi-serve's digest, once per process."""
    return digest(package_root() / "kimi_serve")


def stale(site: Path) -> str | None:
    """Why the engine's kimi-serve (in ``site``) is not the running one, or None when it is (same files)."""
    if digest(site / "kimi_serve") == _running():
        return None
    theirs = next((m.parent.name for m in site.glob("kimi_serve-*.dist-info/METADATA")), "kimi_serve-?")
    version = theirs.removeprefix("kimi_serve-").removesuffix(".dist-info")
    return (
        f"the engine's kimi-serve {version} is not this one ({__version__}): its files differ, so kimi-serve changed "
        "after `engine install`"
    )


def _requires() -> list[str]:
    try:
        return list(importlib.metadata.requires(DIST) or [])
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return []


def _record_line(path: Path, site: Path) -> str:
    hashed = base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()
    return f"{path.relative_to(site).as_posix()},sha256={hashed},{path.stat().st_size}"


def install_self(venv: Path, site: Path) -> dict[str, str]:
    """Copy this kimi-serve into ``site`` (the venv's site-packages) and write ``bin/kimi-serve``; returns what the
    install record keeps of it."""
    source = package_root() / "kimi_serve"
    shutil.copytree(source, site / "kimi_serve", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = site / f"kimi_serve-{__version__}.dist-info"
    dist.mkdir()
    meta = ["Metadata-Version: 2.1", f"Name: {DIST}", f"Version: {__version__}"]
    meta += [f"Requires-Dist: {r}" for r in _requires()]
    (dist / "METADATA").write_text("\n".join(meta) + "\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text(f"[console_scripts]\n{SCRIPT} = {ENTRY}\n", encoding="utf-8")
    (dist / "INSTALLER").write_text(INSTALLER + "\n", encoding="utf-8")
    module, _, func = ENTRY.partition(":")
    script = venv / "bin" / SCRIPT
    script.write_text(
        f"#!{venv / 'bin' / 'python'}\nimport sys\nfrom {module} import {func}\n\nif __name__ == '__main__':\n"
        f"    sys.exit({func}())\n",
        encoding="utf-8",
    )
    script.chmod(0o755)
    files = sorted(p for p in [*(site / "kimi_serve").rglob("*"), *dist.iterdir()] if p.is_file())
    lines = [*(_record_line(p, site) for p in files), f"../../../bin/{SCRIPT},,", f"{dist.name}/RECORD,,"]
    (dist / "RECORD").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"version": __version__, "script": f"bin/{SCRIPT}", "source": str(source), "sha256": digest(source)}


def check_self(python: Path) -> None:
    """The copy imports inside the engine with the lock's packages alone (exit 5 naming what is missing)."""
    done = proc.run([str(python), "-I", "-c", _IMPORTS], timeout=300)
    if done.rc != 0:
        raise env_error(
            f"kimi-serve does not import inside the engine venv: {last_line(done.err)}; {UNTOUCHED}",
            "the lock must carry kimi-serve's runtime dependencies (typer, pyyaml, jinja2, "
            "jsonschema): add them to its .in file and regenerate it (scripts/lock.py)",
        )


def installed_in(python: str) -> tuple[Path, Path] | None:
    """(the ``kimi-serve`` script, the site-packages holding its package) of the engine venv whose interpreter is
    ``python`` (a venv's ``bin/python``, links not followed), when ``engine install`` put kimi-serve there."""
    bin_dir = Path(python).absolute().parent
    script = bin_dir / SCRIPT
    if bin_dir.name != "bin" or not script.is_file():
        return None
    for meta in sorted(bin_dir.parent.glob("lib/python*/site-packages/kimi_serve-*.dist-info/INSTALLER")):
        if meta.read_text(encoding="utf-8", errors="replace").strip() == INSTALLER:
            return script, meta.parent.parent
    return None
