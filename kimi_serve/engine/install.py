"""``engine install``: build the SGLang engine venv from a committed lock, atomically, then patch and record it.

The venv is built in a sibling staging folder (:mod:`kimi_serve.engine.prefix` names it): a standalone copy of the
base interpreter (:mod:`kimi_serve.engine.interpreter`; ``--interpreter link`` links the venv to the base instead), the
packages (``uv pip sync``, or ``pip install --no-deps --require-hashes``), then kimi-serve itself
(:mod:`kimi_serve.engine.own`), so a unit depends on nothing outside the prefix. It is checked, patched and recorded,
and only then swapped in by two renames; a failed or killed install leaves the previous venv where it was (the next
one clears the leftovers, :func:`kimi_serve.engine.prefix.clear_leftovers`). One install of a prefix at a time: it
holds the prefix's install lock and, over an existing venv, its site-packages (exit 75 naming the holder).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kimi_serve import __version__
from kimi_serve.core import proc
from kimi_serve.core.faults import checkpoint
from kimi_serve.core.lock import directory_lock, file_lock
from kimi_serve.core.report import json_meta, rounded
from kimi_serve.core.settings import process_environ
from kimi_serve.engine import interpreter, locks, own
from kimi_serve.engine.discover import installed_versions, key_versions, site_packages
from kimi_serve.engine.installer import run_installer
from kimi_serve.engine.plan import EnginePlan
from kimi_serve.engine.prefix import RECORD_NAME, clear_leftovers
from kimi_serve.engine.warm import WarmPlan, run_warm

_SCHEMA = 1


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
        raise interpreter.env_error(
            f"byte-compiling the venv failed (exit {done.rc}){': ' + tail[0] if tail else ''}; {interpreter.UNTOUCHED}",
            "check free disk space under the prefix, then run engine install again",
        )


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


def _patch(plan: EnginePlan, venv: Path) -> dict[str, Any] | None:
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
    plan: EnginePlan
    record: dict[str, Any]
    seconds: float = field(metadata=json_meta(encode=rounded(1)))


@contextlib.contextmanager
def _venv_lock(plan: EnginePlan) -> Iterator[None]:
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


def install(plan: EnginePlan, *, progress: bool = False) -> InstallResult:
    start = time.monotonic()
    with _venv_lock(plan):
        clear_leftovers(plan.prefix)
        plan.replaces = plan.prefix.exists()
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
            quiet = [] if progress else ["--quiet"]
            if plan.installer == "uv":
                uv = plan.installer_path
                venv = [uv, "venv", "--quiet", "--allow-existing", "--python", base_python_path]
                cmd = [uv, "pip", "sync", *quiet, "--python", str(py), "--require-hashes", *locks.INDEX_OPTIONS]
            else:
                venv = proc.python_argv(base_python_path, "-m", "venv")
                cmd = [*proc.python_argv(str(py), "-m", "pip"), "install", *quiet, "--no-deps", "--require-hashes"]
                cmd += ["--no-compile", "--disable-pip-version-check", "-r"]
            venv += ["--prompt", plan.prefix.name, str(staging)]
            run_installer(venv, "creating the venv", progress=False, env=env)
            run_installer(
                [*cmd, str(plan.lock.path)],
                f"installing {len(plan.lock.pins)} packages from the {plan.lock.name} lock ({plan.installer})",
                progress=progress,
                env=env,
            )
            found = installed_versions(py)
            missing = sorted(n for n, p in plan.lock.pins.items() if found["packages"].get(n) != p.version)
            if missing:
                raise interpreter.env_error(
                    f"after the install {len(missing)} locked packages are missing or differ "
                    f"({', '.join(missing[:5])}); {interpreter.UNTOUCHED}",
                    "regenerate the lock (scripts/lock.py) or report a bug",
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
                "versions": key_versions(found["packages"]),
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


def install_and_warm(plan: EnginePlan, warm: WarmPlan, *, progress: bool = False) -> tuple[InstallResult, list[str]]:
    """`engine install`: the venv from the lock (:func:`install`), then the JIT caches warmed on a GPU host
    (:func:`~kimi_serve.engine.warm.run_warm`: how each step went, one line each)."""
    result = install(plan, progress=progress)
    return result, run_warm(warm)
