"""Where an SGLang install lives and which version it is, found without importing sglang.

The site-packages folder comes from ``importlib.util.find_spec("sglang")`` run in the interpreter that will serve
(a subprocess: kimi-serve's own environment never imports sglang), or is given directly. The version is read from
``sglang/_version.py`` (what ``sglang.__version__`` reports) or, failing that, the dist-info METADATA.
"""

from __future__ import annotations

import json
import re
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from kimi_serve.core import proc
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.settings import SGLANG_PYTHON_ENV, current

_VERSION_RE = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", re.MULTILINE)
_FIND_SPEC = (
    "import importlib.util, json; s = importlib.util.find_spec('sglang'); "
    "print(json.dumps(None if s is None else list(s.submodule_search_locations or [])))"
)
_FIND_TIMEOUT_S = 60
_HAS_SGLANG = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('sglang') else 1)"
BUILD_HINT = (
    f"build the CPU SGLang venv with scripts/build-cpu-venv.sh and export {SGLANG_PYTHON_ENV}=<the path it prints>"
)


def engine_install_hint(profile_ref: str, python: str | None, overridden: bool = False) -> str:
    """The one fix for a profile whose ``python:`` has no SGLang, or another version, as the README gives it:
    `kimi-serve engine install`, which builds that venv from the GPU lock with SGLang patched (its --prefix named when
    --set may have moved ``python:``, as engine install takes no --set). A ``python:`` outside a venv's bin/ has no
    venv to build: pointing it at one comes first."""
    import shlex

    from kimi_serve.core.pin import SGLANG_VERSION

    ref = shlex.quote(profile_ref)
    venv = Path(python).parent.parent if python and Path(python).parent.name == "bin" else None
    if python and venv is None:
        return (
            f"point python: at a venv's bin/python, then kimi-serve engine install --profile {shlex.quote(profile_ref)}"
        )
    prefix = f" --prefix {shlex.quote(str(venv))}" if venv is not None and overridden else ""
    return (
        f"kimi-serve engine install --profile {ref}{prefix}, which builds python:'s venv with "
        f"SGLang {SGLANG_VERSION} from the GPU lock, patched; or point python: at a venv that has it"
    )


_VERSION = "import sys; print('%d.%d' % sys.version_info[:2])"
MIN_PYTHON = (3, 11)  # every Python child runs with -P (core/proc.py python_argv), which 3.11 brought


def too_old(python: str) -> str | None:
    """Why ``python`` cannot run kimi-serve's children (older than :data:`MIN_PYTHON`), or None (also when it does
    not answer as a Python). Asked with ``-I``: any Python 3 runs it, nothing from the working directory."""
    try:
        done = proc.run([python, "-I", "-c", _VERSION], timeout=_FIND_TIMEOUT_S)
    except proc.NotInstalled:
        return None
    major, dot, minor = done.out.strip().partition(".")
    if not (done.ok and dot and major.isdigit() and minor.isdigit()):
        return None
    found = (int(major), int(minor))
    if found >= MIN_PYTHON:
        return None
    return (
        f"{python} is Python {found[0]}.{found[1]}; kimi-serve starts every Python child with -P (3.11+: nothing is "
        "imported from the working directory)"
    )


@dataclass(frozen=True)
class SGLangPython:
    path: str
    origin: str  # how it was found, for reports: the variable, the profile's python:, or this interpreter


def has_sglang(python: str) -> bool:
    """Can ``python`` import sglang? (A subprocess; sglang itself is not imported.)"""
    try:
        return proc.run(proc.python_argv(python, "-c", _HAS_SGLANG), timeout=_FIND_TIMEOUT_S).ok
    except proc.NotInstalled:
        return False


def find_sglang_python(profile_python: str | None = None) -> SGLangPython | None:
    """The interpreter that has SGLang: ``$KIMI_SERVE_SGLANG_PYTHON``, else the profile's ``python:``, else this one;
    None when none of them can import sglang. A variable naming a Python without sglang is an error (exit 5)."""
    env_python = current().sglang_python
    if env_python:
        if not has_sglang(env_python):
            old = too_old(env_python)
            raise KimiServeError(
                f"{SGLANG_PYTHON_ENV}={env_python}: {old}"
                if old
                else f"{SGLANG_PYTHON_ENV}={env_python} is not a Python that can import sglang",
                hint=BUILD_HINT,
                exit_code=ExitCode.ENVIRONMENT,
            )
        return SGLangPython(env_python, SGLANG_PYTHON_ENV)
    if profile_python and Path(profile_python).exists() and has_sglang(profile_python):
        return SGLangPython(profile_python, "profile python")
    if has_sglang(sys.executable):
        return SGLangPython(sys.executable, "this interpreter")
    return None


def require_sglang_python(profile_python: str | None = None) -> str:
    """:func:`find_sglang_python`, or a one-line error (exit 5) naming what was tried and how to build one."""
    found = find_sglang_python(profile_python)
    if found is None:
        tried = ", ".join(p for p in (profile_python, sys.executable) if p)
        raise KimiServeError(
            f"no Python with sglang found (tried {tried})", hint=BUILD_HINT, exit_code=ExitCode.ENVIRONMENT
        )
    return found.path


def site_packages_of(python: str) -> Path:
    """The folder holding the ``sglang`` package that ``python`` would import (sglang itself is not imported)."""
    hint = "pass --python PATH of the SGLang venv"
    try:
        done = proc.run(proc.python_argv(python, "-c", _FIND_SPEC), timeout=_FIND_TIMEOUT_S)
    except proc.NotInstalled:
        raise KimiServeError(f"interpreter {python} not found", hint=hint, exit_code=ExitCode.ENVIRONMENT) from None
    lines = done.out.strip().splitlines()
    if done.rc != 0 or not lines:
        last = (done.err.strip().splitlines() or ["no output"])[-1]
        problem = f"interpreter {python} could not look up sglang: {last}"
        raise KimiServeError(problem, hint=hint, exit_code=ExitCode.ENVIRONMENT)
    locations = json.loads(lines[-1])
    if not locations:
        problem, hint = f"sglang is not installed for {python}", hint + " or --site-packages DIR"
        raise KimiServeError(problem, hint=hint, exit_code=ExitCode.ENVIRONMENT)
    return Path(locations[0]).resolve().parent


def resolve_site_packages(site_packages: Path | None, python: str | None) -> Path:
    """``site_packages`` when given (it must hold ``sglang/``), else the one of ``python`` (default: this one)."""
    if site_packages is not None and python is not None:
        raise KimiServeError("--site-packages and --python are mutually exclusive", hint="pass only one")
    if site_packages is None:
        return site_packages_of(python or sys.executable)
    try:
        has_sglang = (site_packages / "sglang").is_dir()
    except PermissionError as exc:  # a folder this user may not list: the host's refusal, not a kimi-serve bug
        raise KimiServeError(
            f"cannot read {site_packages}: {exc.strerror or exc}",
            where="--site-packages",
            hint="run as the owner of that SGLang (or root), or fix its permissions",
            exit_code=ExitCode.ENVIRONMENT,
        ) from None
    if not has_sglang:
        raise KimiServeError(
            f"{site_packages} has no sglang package", hint="pass the site-packages folder that contains sglang/"
        )
    return site_packages.resolve()


def version_from_text(text: str) -> str | None:
    """The version assigned in a ``sglang/_version.py`` text, or None."""
    match = _VERSION_RE.search(text)
    return match.group(1) if match else None


def installed_version(site_packages: Path) -> str:
    """The sglang version installed in ``site_packages``, read from files only."""
    version_py = site_packages / "sglang" / "_version.py"
    if version_py.is_file():
        version = version_from_text(version_py.read_text(encoding="utf-8", errors="replace"))
        if version:
            return version
    for metadata in sorted(site_packages.glob("sglang-*.dist-info/METADATA")):
        for line in metadata.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    raise KimiServeError(
        f"cannot tell which sglang is installed in {site_packages}: no sglang/_version.py or "
        "sglang-*.dist-info/METADATA",
        hint="reinstall sglang with pip",
        exit_code=ExitCode.ENVIRONMENT,
    )


def wheel_version(wheel: zipfile.ZipFile) -> str | None:
    """The sglang version inside an opened wheel, or None."""
    try:
        return version_from_text(wheel.read("sglang/_version.py").decode("utf-8", errors="replace"))
    except KeyError:
        return None
