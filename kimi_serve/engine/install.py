"""``engine install``: build the SGLang engine venv from a committed lock, atomically, then patch and record it.

The venv is built in a sibling staging folder (``.NAME.kimi-serve-new`` next to the prefix): first a standalone copy
of the base interpreter inside it (``python/``, :mod:`kimi_serve.engine.interpreter`; ``--interpreter link`` builds
the venv on the base interpreter itself instead), then the packages with ``uv pip sync`` (or ``pip install --no-deps
--require-hashes``), then kimi-serve itself (:mod:`kimi_serve.engine.own`), so a unit depends on nothing outside the
prefix. It is checked, patched with the profile's patch set and recorded; only then is it swapped in by two renames
(old -> ``.NAME.kimi-serve-old``, staging -> prefix) and the old one removed. A failed or killed install therefore
leaves the previous venv where it was; the next install clears the staging leftovers and, if it was killed between
the two renames, puts the old venv back first (``engine status`` says so meanwhile, with the command that
completes it). A prefix that is a symbolic link is installed where it points (:mod:`kimi_serve.engine.prefix`): the
renames happen there and the link stays.

One install of a venv at a time: the install holds the lock of its prefix (``.NAME.kimi-serve.lock`` next to it) and,
over an existing venv, its site-packages (:mod:`kimi_serve.core.lock`); a second install of that prefix, or one under
a server `up` runs from it, exits 75 naming the holder. Installs of other prefixes run beside it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kimi_serve import __version__
from kimi_serve.core import proc
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.faults import checkpoint
from kimi_serve.core.lock import directory_lock, file_lock
from kimi_serve.core.settings import current, process_environ
from kimi_serve.engine import interpreter, locks, own
from kimi_serve.engine.prefix import RECORD_NAME, lock_of, moved_link, old_of, resolve, staging_of

INTERPRETERS = ("copy", "link")  # --interpreter: a standalone copy inside the prefix, or the venv links to the base
_SCHEMA = 1
_VERSIONS = (
    "import importlib.metadata as m, json, sys; "
    "print(json.dumps({'python': '%d.%d.%d' % sys.version_info[:3], 'packages': "
    "{d.metadata['Name']: d.version for d in m.distributions() if d.metadata['Name']}}))"
)


def _normalize(name: str) -> str:
    return locks.normalize(name)


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
    raise KimiServeError(
        f"the lock targets Python {version} and no python{version} is on PATH",
        hint=f"install Python {version} (apt-get install python{version}-venv)",
        exit_code=ExitCode.ENVIRONMENT,
    )


def is_venv(path: Path) -> bool:
    return (path / "pyvenv.cfg").is_file()


def site_packages(venv: Path, version: str) -> Path:
    return venv / "lib" / f"python{version}" / "site-packages"


@dataclass
class Plan:
    prefix: Path  # the folder installed: --prefix, or where it points when it is a link
    lock: locks.Lock
    installer: str  # "uv" or "pip"
    installer_path: str
    python: str  # the base interpreter
    python_version: str
    patch_set: tuple[str, ...]  # the sets to apply together (a profile's patch_set list); () for none
    profile: str | None
    interpreter: str = "copy"  # copy: a standalone copy of `python` inside the prefix; link: the venv links to it
    with_kimi_serve: bool = True  # kimi-serve itself in the engine (engine/own.py); False: a test engine
    link: Path | None = None  # --prefix as given, when it is a link to `prefix` (the link stays)
    options: tuple[str, ...] = ()  # the engine install options that repeat this install (the record keeps them)
    staging: Path = field(init=False)
    replaces: bool = field(init=False)

    def __post_init__(self) -> None:
        self.staging = staging_of(self.prefix)
        self.replaces = self.prefix.exists()

    @property
    def lock_file(self) -> Path:
        """The install lock of this prefix (a sibling file: the prefix itself is swapped by a rename)."""
        return lock_of(self.prefix)

    @property
    def old(self) -> Path:
        return old_of(self.prefix)

    def to_dict(self) -> dict[str, Any]:
        return {
            "prefix": str(self.prefix),
            "link": str(self.link) if self.link else None,
            "options": list(self.options),
            "lock": self.lock.name,
            "lock_file": str(self.lock.path),
            "lock_sha256": self.lock.sha256,
            "packages": len(self.lock.pins),
            "sglang": getattr(self.lock.pins.get("sglang"), "version", None),
            "installer": self.installer,
            "installer_path": self.installer_path,
            "python": self.python,
            "python_version": self.python_version,
            "interpreter": self.interpreter,
            "kimi_serve": self.with_kimi_serve,
            "patch_set": "+".join(self.patch_set) or None,
            "profile": self.profile,
            "staging": str(self.staging),
            "replaces_existing": self.replaces,
            "lock_path": str(self.lock_file),
        }


def make_plan(
    prefix: Path,
    lock_name: str,
    patch_set: str | Sequence[str] | None,
    profile: str | None,
    installer: str | None = None,
    interpreter_kind: str = "copy",
    with_kimi_serve: bool = True,
    python: str | None = None,
) -> Plan:
    lock = locks.load(lock_name)
    given = prefix.expanduser().absolute()
    prefix = resolve(given)
    for moved in (moved_link(given), moved_link(prefix)):  # an older kimi-serve moved a link aside (engine/prefix.py)
        if moved is not None:
            raise moved
    if prefix.exists() and not is_venv(prefix) and (not prefix.is_dir() or any(prefix.iterdir())):
        raise KimiServeError(
            f"{prefix} exists and is not a venv"
            + (f" (the link {given} points there)" if prefix != given else "")
            + "; refusing to replace it",
            hint="pass --prefix of an existing engine venv or of a new folder",
            exit_code=ExitCode.USAGE,
        )
    version = target_python(lock)
    uv = find_uv()
    if installer == "pip" or (installer is None and uv is None):
        kind, path = "pip", "python -m pip"
    elif uv is None:
        raise KimiServeError(
            "uv not found",
            hint="pip install uv (requirements/dev.txt pins it), or drop --installer",
            exit_code=ExitCode.ENVIRONMENT,
        )
    else:
        kind, path = "uv", uv
    sets = (patch_set,) if isinstance(patch_set, str) else tuple(patch_set or ())
    if interpreter_kind not in INTERPRETERS:
        raise KimiServeError(
            f"--interpreter {interpreter_kind}: unknown",
            where="--interpreter",
            hint="pass --interpreter copy (a standalone interpreter inside the prefix) or --interpreter link",
        )
    base = base_python(version, python)
    options = ["--lock", lock_name if lock_name in locks.ENGINE_LOCKS else str(lock.path.absolute())]
    options += (["--profile", profile] if profile else []) if sets else ["--no-patches"]
    options += ["--installer", installer] if installer else []
    options += ["--interpreter", interpreter_kind] if interpreter_kind != "copy" else []
    options += ["--python", python] if python else []
    options += [] if with_kimi_serve else ["--no-kimi-serve"]
    link = given if prefix != given else None
    return Plan(
        prefix, lock, kind, path, base, version, sets, profile, interpreter_kind, with_kimi_serve, link, tuple(options)
    )


# --------------------------------------------------------------------------------------------------------- lock


# ------------------------------------------------------------------------------------------------------ install


_UV_MISMATCH = re.compile(r"Hash mismatch for `([^`]+)`")
_PIP_MISMATCH = re.compile(r"^\s+(\S+==\S+) from \S+", re.MULTILINE)


def hash_mismatch(output: str) -> list[str]:
    """The packages (``name==version``) uv's or pip's output reports a sha256 mismatch for."""
    found = _UV_MISMATCH.findall(output)
    if "DO NOT MATCH THE HASHES" in output:
        found += _PIP_MISMATCH.findall(output.split("DO NOT MATCH THE HASHES", 1)[1])
    return list(dict.fromkeys(found))


def _compile(py: Path, staging: Path) -> None:
    """Byte-compile the venv once, after the patches (so the patched files' caches are current). The unit runs the
    engine read-only (``ProtectSystem=strict``), where Python cannot write ``__pycache__``, and so do hosts that set
    PYTHONDONTWRITEBYTECODE: without this, every start compiles SGLang and torch from source again (measured on a
    2-core machine: importing SGLang's HTTP server took 33.7 s of CPU with no .pyc, 13.6 s with them; each server
    start imports it in three processes). A cache records its source's path and mtime, and Python reads it from
    wherever the venv is moved to. compileall's exit status 1 (a file some wheel ships that is not Python 3, e.g. a
    test fixture) is not an install failure."""
    dirs = [str(d) for d in (staging / "lib", staging / interpreter.DIR / "lib") if d.is_dir()]
    done = proc.run(
        [*proc.python_argv(str(py), "-m", "compileall"), "-q", "-j", "0", *dirs], timeout=None, errors="replace"
    )
    if done.rc not in (0, 1):
        tail = (done.err.strip() or done.out.strip()).splitlines()[-1:]
        raise KimiServeError(
            f"byte-compiling the venv failed (exit {done.rc}){': ' + tail[0] if tail else ''}; the previous venv is "
            "untouched",
            hint="check free disk space under the prefix, then run engine install again",
            exit_code=ExitCode.ENVIRONMENT,
        )


def _run(cmd: list[str], what: str, *, progress: bool, env: dict[str, str] | None = None) -> None:
    try:
        if progress:  # the long download: show uv/pip's output as it comes (stderr, so --json stays clean)
            streamed = proc.stream(cmd, sys.stderr.write, env=env)
            rc, output = streamed.rc, streamed.out
        else:
            done = proc.run(cmd, timeout=None, env=env, errors="replace")
            rc = done.rc
            output = done.err.strip() or done.out.strip()
    except (FileNotFoundError, proc.NotInstalled) as exc:
        raise KimiServeError(
            f"{what}: {cmd[0]} not found", hint="install it, or pass --installer pip", exit_code=ExitCode.ENVIRONMENT
        ) from exc
    if rc != 0:
        mismatched = hash_mismatch(output)
        if mismatched:
            raise KimiServeError(
                f"{what} failed: hash mismatch for {', '.join(mismatched[:5])}: the downloaded file's sha256 is not "
                "the one the lock pins; nothing was installed and the previous venv is untouched",
                hint="use the lock shipped with kimi-serve (--lock gpu|cpu) or regenerate it with scripts/lock.py; "
                "if the lock is right, the index served another file: check the index or mirror",
                exit_code=ExitCode.ENVIRONMENT,
            )
        lines = output.splitlines()
        tail = next((ln.strip() for ln in reversed(lines) if ln.strip()), "")
        detail = f": {tail}" if tail else " (see the output above)"
        raise KimiServeError(
            f"{what} failed (exit {rc}){detail}; the previous venv is untouched",
            hint="check the lock and the network (PyPI), then run engine install again",
            exit_code=ExitCode.ENVIRONMENT,
        )


def installed_versions(python: Path) -> dict[str, Any]:
    data: dict[str, Any] = interpreter.python_json(
        str(python), _VERSIONS, cannot="list its packages", hint="rebuild it with kimi-serve engine install"
    )
    data["packages"] = {_normalize(k): v for k, v in data["packages"].items()}
    return data


def _relocate(staging: Path, prefix: Path) -> None:
    """A venv names its own path in bin/ (shebangs, activate scripts, the link to a copied interpreter inside it) and
    pyvenv.cfg: point them at the prefix (links inside the venv become relative: they survive the rename)."""
    old, new = str(staging).encode(), str(prefix).encode()
    for path in [*(staging / "bin").iterdir(), staging / "pyvenv.cfg"]:
        if path.is_symlink():
            target = os.readlink(path)
            if os.path.isabs(target) and Path(target).is_relative_to(staging):
                path.unlink()
                path.symlink_to(os.path.relpath(target, path.parent))
            continue
        if not path.is_file() or path.stat().st_size > 1 << 20:
            continue
        data = path.read_bytes()
        if old in data and b"\0" not in data[:1024]:
            path.write_bytes(data.replace(old, new))


def _recover(plan: Plan) -> None:
    """Clear what a killed install left: a staging folder, or (killed between the renames) the old venv aside."""
    moved = moved_link(plan.prefix)  # a link aside is never removed (nor followed): its owner decides
    if moved is not None:
        raise moved
    if plan.staging.is_symlink():
        plan.staging.unlink()
    elif plan.staging.exists():
        shutil.rmtree(plan.staging)
    if plan.old.exists():
        if not plan.prefix.exists():
            os.rename(plan.old, plan.prefix)
        else:
            shutil.rmtree(plan.old)
    plan.replaces = plan.prefix.exists()


def _patch(plan: Plan, venv: Path) -> dict[str, Any] | None:
    if not plan.patch_set:
        return None
    from kimi_serve.patches import apply_sets, load_patch_set

    sets = [load_patch_set(name) for name in plan.patch_set]
    # The patch record and backups of `patches apply` are keyed by the site-packages path, which is the staging
    # folder here: keep them out of the host's state. Hashes decide patch state, and revert works without a record.
    # All the sets or none (apply_sets); the staging venv is thrown away on a failure anyway.
    with tempfile.TemporaryDirectory(prefix="kimi-serve-engine-patch-") as state:
        results = apply_sets(site_packages(venv, plan.python_version), sets, state_dir=Path(state))
    return {
        "set": "+".join(ps.name for ps in sets),
        "patches": [p.name for ps in sets for p in ps.patches],
        "applied": all(r.status.all_applied for r in results),
        "message": "\n".join(r.message for r in results),
    }


@dataclass
class InstallResult:
    plan: Plan
    record: dict[str, Any]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"plan": self.plan.to_dict(), "record": self.record, "seconds": round(self.seconds, 1)}


@contextlib.contextmanager
def _venv_lock(plan: Plan) -> Iterator[None]:
    """The lock of the venv being installed: its prefix's install lock (one install per prefix), and, over a venv that
    exists, its site-packages exclusively (a server `up` runs from it, or a patch change in it, refuses: exit 75)."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(
            file_lock(
                plan.lock_file,
                "engine install",
                doing=f"is installing {plan.prefix}",
                cannot=f"pass a --prefix whose folder ({plan.prefix.parent}) you can write",
            )
        )
        current = site_packages(plan.prefix, plan.python_version)
        if current.is_dir():
            stack.enter_context(
                directory_lock(
                    current,
                    doing=f"is changing the SGLang in {current}",
                    doing_shared=f"serves from the SGLang in {current}",
                )
            )
        yield


def install(plan: Plan, *, progress: bool = False) -> InstallResult:
    start = time.monotonic()
    with _venv_lock(plan):
        _recover(plan)
        plan.prefix.parent.mkdir(parents=True, exist_ok=True)
        staging = plan.staging
        env = dict(process_environ(), UV_PYTHON_DOWNLOADS="never")
        try:
            py = staging / "bin" / "python"
            base, base_python_path = None, plan.python
            if plan.interpreter == "copy":  # the venv's own interpreter, inside it (module doc)
                base = interpreter.describe(plan.python)
                staging.mkdir(parents=True)
                copied = interpreter.copy(base, staging / interpreter.DIR)
                interpreter.check(copied, base)
                base_python_path = str(copied)
            if plan.installer == "uv":
                _run(
                    [
                        plan.installer_path,
                        "venv",
                        "--quiet",
                        "--allow-existing",
                        "--python",
                        base_python_path,
                        "--prompt",
                        plan.prefix.name,
                        str(staging),
                    ],
                    "creating the venv",
                    progress=False,
                    env=env,
                )
                cmd = [
                    plan.installer_path,
                    "pip",
                    "sync",
                    "--python",
                    str(py),
                    "--require-hashes",
                    *locks.INDEX_OPTIONS,
                    str(plan.lock.path),
                ]
            else:
                _run(
                    [*proc.python_argv(base_python_path, "-m", "venv"), "--prompt", plan.prefix.name, str(staging)],
                    "creating the venv",
                    progress=False,
                )
                cmd = [
                    *proc.python_argv(str(py), "-m", "pip"),
                    "install",
                    "--no-deps",
                    "--require-hashes",
                    "--no-compile",
                    "--disable-pip-version-check",
                    "-r",
                    str(plan.lock.path),
                ]
            if not progress:
                cmd.insert(cmd.index("sync" if plan.installer == "uv" else "install") + 1, "--quiet")
            _run(
                cmd,
                f"installing {len(plan.lock.pins)} packages from the {plan.lock.name} lock ({plan.installer})",
                progress=progress,
                env=env,
            )
            found = installed_versions(py)
            missing = sorted(n for n, p in plan.lock.pins.items() if found["packages"].get(n) != p.version)
            if missing:
                raise KimiServeError(
                    f"after the install {len(missing)} locked packages are missing or differ "
                    f"({', '.join(missing[:5])}); the previous venv is untouched",
                    hint="regenerate the lock (scripts/lock.py) or report a bug",
                    exit_code=ExitCode.ENVIRONMENT,
                )
            kimi = None
            if plan.with_kimi_serve:
                kimi = own.install_self(staging, site_packages(staging, plan.python_version))
                own.check_self(py)
            patches = _patch(plan, staging)
            _compile(py, staging)
            linked = os.path.realpath(plan.python)
            record = {
                "schema": _SCHEMA,
                "lock": plan.lock.name,
                "lock_file": plan.lock.path.name,
                "lock_sha256": plan.lock.sha256,
                "lock_input_sha256": plan.lock.input_sha256,
                "packages": len(plan.lock.pins),
                "installer": plan.installer,
                "python": found["python"],
                "versions": {
                    k: found["packages"].get(k)
                    for k in ("sglang", "torch", "flashinfer-python", "sglang-kernel", "transformers")
                    if found["packages"].get(k)
                },
                "patch_set": patches["set"] if patches else None,
                "patches": patches["patches"] if patches else [],
                "interpreter": {
                    "kind": plan.interpreter,
                    "base": str(base.executable) if base else linked,
                    "path": f"{interpreter.DIR}/bin/python{plan.python_version}" if base else linked,
                },
                "kimi_serve": kimi,
                "installed_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "kimi_serve_version": __version__,
                "prefix": str(plan.prefix),
                "link": str(plan.link) if plan.link else None,
                "options": list(plan.options),
            }
            (staging / RECORD_NAME).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
            _relocate(staging, plan.prefix)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        if plan.prefix.exists():  # a folder, never a link (make_plan resolved it)
            checkpoint("engine.aside")
            os.rename(plan.prefix, plan.old)
            checkpoint("engine.swap")  # killed here: no venv at the prefix; engine status says so
            os.rename(staging, plan.prefix)
            checkpoint("engine.clear")
            shutil.rmtree(plan.old, ignore_errors=True)
        else:
            checkpoint("engine.swap")
            os.rename(staging, plan.prefix)
    return InstallResult(plan, record, time.monotonic() - start)
