"""``engine status``: what an engine venv holds against its lock: versions, lock hash, patch state, drift, deps."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from kimi_serve.core import proc
from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.report import json_meta
from kimi_serve.engine import locks, own
from kimi_serve.engine.discover import installed_versions, key_versions, site_packages
from kimi_serve.engine.interpreter import env_error, last_line
from kimi_serve.engine.prefix import install_command, interrupted, moved_link, read_record, recorded_lock, resolve

# Run inside the engine venv: every installed distribution's requirements (markers evaluated, no extras) that are
# missing or unsatisfied, like `pip check`, but the same with a uv-built venv that has no pip.
_DEPS_CHECK = r"""
import importlib.metadata as m, json
try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name as c
except ImportError:  # a venv without packaging: pip vendors it
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name as c
inst = {c(d.metadata['Name']): d for d in m.distributions() if d.metadata['Name']}
out = []
for name, d in sorted(inst.items()):
    for r in d.requires or []:
        req = Requirement(r)
        if req.marker and not req.marker.evaluate({'extra': ''}):
            continue
        dep = inst.get(c(req.name))
        if dep is None:
            out.append([name, str(req), None])
        elif req.specifier and not req.specifier.contains(dep.version, prereleases=True):
            out.append([name, str(req), dep.version])
print(json.dumps(out))
"""
# what python -m venv bootstraps, when a lock leaves them out; kimi-serve's own copy (engine/own.py, in the record)
_IGNORED_EXTRAS = {"pip", "setuptools", "wheel", "kimi-serve"}


@dataclass
class Drift:
    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("kind",)

    name: str
    locked: str | None  # None: installed but not in the lock
    installed: str | None  # None: locked but missing

    @property
    def kind(self) -> str:
        return "extra" if self.locked is None else "missing" if self.installed is None else "changed"


@dataclass
class EngineStatus:
    JSON_PROPERTIES: ClassVar[tuple[Any, ...]] = (
        "ok",
        ("lock_sha256", lambda s: s.lock.sha256),
        ("installed_lock_sha256", lambda s: (s.record or {}).get("lock_sha256")),
        ("findings", lambda s: s.findings()),
    )

    prefix: Path
    record: dict[str, Any] | None
    lock: locks.Lock = field(metadata=json_meta(encode=lambda lock: lock.name))
    python: str
    versions: dict[str, str]
    drift: list[Drift] = field(default_factory=list)
    lock_changed: bool = False  # the lock file differs from the one the venv was installed from
    patch_state: str = "none"  # applied | not applied | partial | conflict | none | unknown: ...
    patch_set: str | None = None
    # [pkg, requirement, installed-or-None]
    conflicts: list[list[Any]] = field(default_factory=list, metadata=json_meta(key="dependency_conflicts"))
    # declared deps the lock leaves out on purpose
    omitted: list[str] = field(default_factory=list, metadata=json_meta(key="omitted_by_lock"))
    # why the engine's own kimi-serve is not the running one (engine/own.py); None: it is
    kimi_serve: str | None = field(default=None, metadata=json_meta(key="kimi_serve_stale"))
    fix: str = ""  # the engine install that rebuilds it with the options it was installed with

    @property
    def ok(self) -> bool:
        return (
            self.record is not None
            and not self.drift
            and not self.lock_changed
            and not self.conflicts
            and self.patch_state in ("applied", "none")
            and self.kimi_serve is None
        )

    def findings(self) -> list[str]:
        out = []
        if self.record is None:
            out.append("no install record: this venv was not built by kimi-serve engine install")
        if self.lock_changed:
            out.append(
                f"the {self.lock.name} lock changed since the install (installed from "
                f"{(self.record or {}).get('lock_sha256', '?')[:12]}, lock is now {self.lock.sha256[:12]})"
            )
        for d in self.drift:
            out.append(f"{d.name}: {d.kind} (lock {d.locked or '-'}, installed {d.installed or '-'})")
        for pkg, req, have in self.conflicts:
            out.append(f"{pkg} requires {req}, " + ("not installed" if have is None else f"installed {have}"))
        if self.patch_state not in ("applied", "none"):
            out.append(f"patch set {self.patch_set}: {self.patch_state}")
        if self.kimi_serve:
            out.append(f"{self.kimi_serve}: units run the engine's copy")
        return out


def dependency_problems(python: Path) -> list[list[Any]]:
    done = proc.run([str(python), "-I", "-c", _DEPS_CHECK], timeout=120)
    if done.rc != 0:
        return [["?", f"dependency check failed: {last_line(done.err)}", None]]
    conflicts: list[list[Any]] = json.loads(done.out.strip().splitlines()[-1])
    return conflicts


def _patch_state(site: Path, set_name: str) -> str:
    from kimi_serve.patches import load_patch_set, status

    try:  # the record names the sets applied together as "a+b" (one name before patch_set lists)
        sts = [status(site, load_patch_set(name)) for name in set_name.split("+")]
    except KimiServeError as exc:
        return f"unknown: {exc.message}"
    if all(st.all_applied for st in sts):
        return "applied"
    if all(st.pristine for st in sts):
        return "not applied"
    return "conflict" if any(p.state.value == "conflict" for st in sts for p in st.patches) else "partial"


def engine_status(prefix: Path, lock_name: str | None = None) -> EngineStatus:
    prefix = prefix.expanduser().absolute()
    python = prefix / "bin" / "python"
    # what an unfinished install left (killed between its renames, an older kimi-serve's moved link) comes first
    unfinished = moved_link(prefix) or moved_link(resolve(prefix)) or (None if python.exists() else interrupted(prefix))
    if unfinished is not None:
        raise unfinished
    if not python.exists():
        raise env_error(
            f"{prefix} is not an engine venv (no bin/python)",
            install_command(prefix, None, lock_name),
        )
    record = read_record(prefix)
    name = lock_name or recorded_lock(record) or "gpu"
    lock = locks.load(name)
    found = installed_versions(python)
    installed: dict[str, str] = found["packages"]
    drift = [
        Drift(n, p.version, installed.get(n)) for n, p in sorted(lock.pins.items()) if installed.get(n) != p.version
    ]
    drift += [
        Drift(n, None, v) for n, v in sorted(installed.items()) if n not in lock.pins and n not in _IGNORED_EXTRAS
    ]
    omitted = locks.omitted_from_cpu() if lock.name == "cpu" else set()
    problems = dependency_problems(python)
    conflicts = [p for p in problems if not (p[2] is None and locks.normalize(locks.req_name(p[1])) in omitted)]
    site = site_packages(prefix, ".".join(found["python"].split(".")[:2]))
    set_name = (record or {}).get("patch_set")
    return EngineStatus(
        prefix,
        record,
        lock,
        found["python"],
        key_versions(installed),
        drift,
        record is not None and record.get("lock_sha256") != lock.sha256,
        _patch_state(site, set_name) if set_name else "none",
        set_name,
        conflicts,
        sorted(omitted),
        own.stale(site) if (site / "kimi_serve").is_dir() else None,  # None: no copy, or the running one
        install_command(prefix, record, lock_name),
    )
