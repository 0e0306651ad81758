"""The plan of an ``engine install``: which lock, prefix, installer, base Python and patch sets, checked before
anything is touched (``engine install --dry-run`` prints it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.report import json_meta
from kimi_serve.engine import locks
from kimi_serve.engine.discover import base_python, find_uv, is_venv, target_python
from kimi_serve.engine.interpreter import env_error
from kimi_serve.engine.prefix import lock_of, moved_link, old_of, refuse_kimi_serves_own, resolve, staging_of

INTERPRETERS = ("copy", "link")  # --interpreter: a standalone copy inside the prefix, or the venv links to the base


@dataclass
class EnginePlan:
    JSON_PROPERTIES: ClassVar[tuple[Any, ...]] = (
        ("lock_file", lambda p: p.lock.path),
        ("lock_sha256", lambda p: p.lock.sha256),
        ("packages", lambda p: len(p.lock.pins)),
        ("sglang", lambda p: getattr(p.lock.pins.get("sglang"), "version", None)),
        ("lock_path", lambda p: p.lock_file),
    )

    prefix: Path  # the folder installed: --prefix, or where it points when it is a link
    lock: locks.Lock = field(metadata=json_meta(encode=lambda lock: lock.name))
    installer: str  # "uv" or "pip"
    installer_path: str
    python: str  # the base interpreter
    python_version: str
    # the sets to apply together (a profile's patch_set list); () for none
    patch_set: tuple[str, ...] = field(metadata=json_meta(encode=lambda s: "+".join(s) or None))
    profile: str | None
    interpreter: str = "copy"  # copy: a standalone copy of `python` inside the prefix; link: the venv links to it
    # kimi-serve itself in the engine (engine/own.py); False: a test engine
    with_kimi_serve: bool = field(default=True, metadata=json_meta(key="kimi_serve"))
    link: Path | None = None  # --prefix as given, when it is a link to `prefix` (the link stays)
    options: tuple[str, ...] = ()  # the engine install options that repeat this install (the record keeps them)
    staging: Path = field(init=False)
    replaces: bool = field(init=False, metadata=json_meta(key="replaces_existing"))

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


def make_plan(
    prefix: Path,
    lock_name: str,
    patch_set: str | Sequence[str] | None,
    profile: str | None,
    installer: str | None = None,
    interpreter_kind: str = "copy",
    with_kimi_serve: bool = True,
    python: str | None = None,
) -> EnginePlan:
    lock = locks.load(lock_name)
    given = prefix.expanduser().absolute()
    prefix = resolve(given)
    refuse_kimi_serves_own(given, prefix)  # before anything there is read, replaced or cleared
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
        raise env_error("uv not found", "pip install uv (requirements/dev.txt pins it), or drop --installer")
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
    return EnginePlan(
        prefix, lock, kind, path, base, version, sets, profile, interpreter_kind, with_kimi_serve, link, tuple(options)
    )
