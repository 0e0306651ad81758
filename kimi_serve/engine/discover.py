"""What an engine install builds with and reads back: uv, the base Python of the lock's version, what a venv is and
where its site-packages are, the versions installed in it (``engine install``, ``engine status``)."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from kimi_serve.core import proc
from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.settings import current
from kimi_serve.engine import interpreter, locks

_VERSIONS = (
    "import importlib.metadata as m, json, sys; "
    "print(json.dumps({'python': '%d.%d.%d' % sys.version_info[:3], 'packages': "
    "{d.metadata['Name']: d.version for d in m.distributions() if d.metadata['Name']}}))"
)


def find_uv() -> str | None:
    """uv from $KIMI_SERVE_UV, PATH, or next to this interpreter (the dev lock installs it into .venv/bin)."""
    for cand in (current().uv, shutil.which("uv"), str(Path(sys.executable).parent / "uv")):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return cand
    return None


def target_python(lock: locks.Lock) -> str:
    """The X.Y the lock targets (its header's ``target:``), default the project's."""
    m = re.search(r"CPython (\d+\.\d+)", lock.meta.get("target", ""))
    return m.group(1) if m else locks.PYTHON_VERSION


def base_python(version: str, given: str | None = None) -> str:
    """An interpreter of ``version`` to build the venv from: ``given`` (--python, checked), else this one when it
    matches, else pythonX.Y on PATH."""
    if given:
        path = shutil.which(given) or given
        found = None
        if os.access(path, os.X_OK):
            done = proc.run([path, "-I", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], timeout=60)
            found = done.out.strip() if done.rc == 0 else None
        if found != version:
            raise KimiServeError(
                f"--python {given}: " + (f"Python {found}, the lock targets {version}" if found else "does not run"),
                where="--python",
                hint=f"pass a python{version} (e.g. /usr/bin/python{version})",
            )
        return path
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == version:
        return sys.executable
    found = shutil.which(f"python{version}")
    if found:
        return found
    raise interpreter.env_error(
        f"the lock targets Python {version} and no python{version} is on PATH",
        f"install Python {version} (apt-get install python{version}-venv)",
    )


def is_venv(path: Path) -> bool:
    return (path / "pyvenv.cfg").is_file()


def site_packages(venv: Path, version: str) -> Path:
    return venv / "lib" / f"python{version}" / "site-packages"


def installed_versions(python: Path) -> dict[str, Any]:
    data: dict[str, Any] = interpreter.python_json(
        str(python), _VERSIONS, cannot="list its packages", hint="rebuild it with kimi-serve engine install"
    )
    data["packages"] = {locks.normalize(k): v for k, v in data["packages"].items()}
    return data


def key_versions(packages: dict[str, str]) -> dict[str, str]:
    """The versions an install records and ``engine status`` shows: SGLang and what it is built on."""
    return {
        k: packages[k]
        for k in ("sglang", "torch", "flashinfer-python", "sglang-kernel", "transformers")
        if packages.get(k)
    }
