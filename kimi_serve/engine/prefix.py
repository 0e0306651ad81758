"""Where an engine venv lives, and what an install left next to it (docs/engine.md, `engine install`): the siblings
``.NAME.kimi-serve-new`` (staging), ``.NAME.kimi-serve-old`` and the install lock ``.NAME.kimi-serve.lock``; a prefix
that is a symbolic link resolved to the folder it points to (the install happens there and the link stays); the
previous venv left aside by an install killed between its two renames, or the link an older kimi-serve moved aside
(reported with its fix: the operator decides which venv to keep).
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.files import link_refused
from kimi_serve.core.inputs import read_json
from kimi_serve.core.lock import flock_holder
from kimi_serve.engine.interpreter import env_error

if TYPE_CHECKING:
    from kimi_serve.profile.loader import Profile

RECORD_NAME = "kimi-serve-engine.json"


def profile_prefix(p: Profile, given: Path | None) -> Path:
    """The venv an engine command acts on: ``given`` (--prefix), else the venv of the profile's ``python:``."""
    if given is not None:
        return given
    python = p.data.get("python")
    if not python:
        raise KimiServeError(
            f"profile {p.name} sets no python: location for the engine",
            hint="pass --prefix DIR, or use a profile with python: (e.g. prod)",
            exit_code=ExitCode.USAGE,
        )
    path = Path(python)
    if path.parent.name != "bin":
        raise KimiServeError(
            f"profile {p.name}: python: {python} is not inside a venv's bin/",
            hint="pass --prefix DIR",
            exit_code=ExitCode.USAGE,
        )
    return path.parent.parent


def _within(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree.rstrip("/") + "/")


def refuse_kimi_serves_own(given: Path, prefix: Path) -> None:
    """Exit 2, before anything is touched, when the prefix (as given, where its links lead, or its real path) is, sits
    inside or contains a folder of kimi-serve's own: its state root (the locks, records and backups an install next
    to them would clear), the key folder, or a systemd unit directory. An install replaces the prefix and removes what
    an earlier one left beside it."""
    from kimi_serve.check.owned_paths import KEY_HOME, UNIT_TREES
    from kimi_serve.core.settings import DEFAULT_STATE_ROOT, state_root

    state = "kimi-serve's state root (its locks, records and backups)"
    trees = [
        *((str(t), state) for t in (DEFAULT_STATE_ROOT, state_root())),
        (KEY_HOME, "kimi-serve's key folder"),
        *((t, "a systemd unit directory") for t in UNIT_TREES),
    ]
    for path in dict.fromkeys((str(given), str(prefix), os.path.realpath(prefix))):
        for tree, what in trees:
            for t in dict.fromkeys((tree, os.path.realpath(tree))):
                how = "is" if path == t else "sits inside" if _within(path, t) else ""
                how = how or ("contains" if _within(t, path) else "")
                if how:
                    shown = str(given) if path == str(given) else f"{given} (resolves to {path})"
                    raise KimiServeError(
                        f"the engine prefix {shown} {how} {t}, {what}: an install replaces its prefix and clears "
                        "what is beside it",
                        where="--prefix (or the profile's python:)",
                        hint="pick a folder of the engine's own, e.g. --prefix /opt/kimi-serve/venv",
                        exit_code=ExitCode.USAGE,
                    )


def staging_of(prefix: Path) -> Path:
    return prefix.parent / f".{prefix.name}.kimi-serve-new"


def old_of(prefix: Path) -> Path:
    return prefix.parent / f".{prefix.name}.kimi-serve-old"


def lock_of(prefix: Path) -> Path:
    """The install lock of ``prefix`` (a sibling file: the prefix itself is swapped by a rename)."""
    return prefix.parent / f".{prefix.name}.kimi-serve.lock"


def read_record(prefix: Path) -> dict[str, Any] | None:
    try:
        record = read_json(prefix / RECORD_NAME)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def resolve(given: Path) -> Path:
    """The folder an install of ``given`` replaces: ``given`` itself, or, when it is a symbolic link, the folder at
    the end of its links (renaming the link aside would lose it). Exit 2 for a link that loops."""
    if not given.is_symlink():
        return given
    real = Path(os.path.realpath(given))
    if real.is_symlink():
        raise KimiServeError(
            f"--prefix {given} is a link that does not end at a folder ({given} -> {os.readlink(given)} loops)",
            where="--prefix",
            hint=f"point {given} at the venv's folder, or pass --prefix of a folder",
            exit_code=ExitCode.USAGE,
        )
    return real


def moved_link(given: Path) -> KimiServeError | None:
    """The state an older kimi-serve's install left over a prefix that was a link: it renamed the link
    itself aside as ``.NAME.kimi-serve-old`` and put its new venv in the link's place (or was killed in between),
    after which every install failed. Which venv to keep is the operator's decision: the error names both fixes."""
    old = old_of(given)
    if not old.is_symlink():
        return None
    link = f"{given} -> {os.readlink(old)}"
    if os.path.lexists(given):
        return env_error(
            f"{given}: an older kimi-serve replaced the link {link} with a new venv and left the link aside as {old}",
            f"keep the new venv: rm {old}; or go back to the link: rm -r {given} && mv {old} {given}; "
            "then run engine install again",
        )
    return env_error(
        f"{given}: an older kimi-serve's engine install was killed after it moved the link {link} aside as {old}",
        f"put the link back: mv {old} {given}, then run engine install again",
    )


def clear_leftovers(prefix: Path) -> None:
    """Clear what a killed install of ``prefix`` left: a staging folder, or (killed between the renames) the old venv
    aside, put back when no venv is at the prefix. A link moved aside is never removed (nor followed): its owner
    decides (:func:`moved_link`); a link planted at either name is refused (exit 5), never removed through nor renamed
    into the prefix."""
    if (moved := moved_link(prefix)) is not None:
        raise moved
    staging, old = staging_of(prefix), old_of(prefix)
    for aside in (staging, old):
        if aside.is_symlink():
            raise link_refused(aside, f"a symbolic link (to {os.readlink(aside)}) beside the engine", f"rm {aside}")
    if staging.exists():
        shutil.rmtree(staging)
    if old.exists():
        if not prefix.exists():
            os.rename(old, prefix)
        else:
            shutil.rmtree(old)


def recorded_lock(record: dict[str, Any] | None) -> str | None:
    """The lock an install was run with (its ``--lock``: a shipped lock's name or a lock file's path)."""
    options = [str(o) for o in (record or {}).get("options") or []]
    if "--lock" in options[:-1]:
        return options[options.index("--lock") + 1]
    lock = (record or {}).get("lock")
    return str(lock) if lock else None


def install_command(given: Path, record: dict[str, Any] | None, lock: str | None = None) -> str:
    """The ``engine install`` that (re)builds ``given`` as the install that wrote ``record`` did (its options), with
    ``lock`` instead of its lock when given."""
    options = [str(o) for o in (record or {}).get("options") or []]
    if "--lock" in options[:-1]:
        del options[options.index("--lock") : options.index("--lock") + 2]
    lock = lock or recorded_lock(record) or "gpu"
    return shlex.join(["kimi-serve", "engine", "install", "--prefix", str(given), "--lock", lock, *options])


def interrupted(given: Path) -> KimiServeError | None:
    """What stands at ``given`` instead of a venv when an install of it did not finish: running now (its lock is
    held), killed between its two renames (the previous venv aside), or an older kimi-serve's moved link."""
    if (found := moved_link(given)) is not None:
        return found
    real = resolve(given)
    old = old_of(real)
    if real.exists() or not old.is_dir():
        return None
    holder = flock_holder(lock_of(real))
    if holder is not None:
        return env_error(
            f"{given}: {holder} is installing it (between its two renames)",
            "wait for it to finish, then run engine status again",
        )
    staging = staging_of(real)
    record = read_record(staging) or read_record(old)
    return env_error(
        f"{given}: an engine install was interrupted between its two renames: the previous venv is at {old}"
        + (f", the new one at {staging}" if read_record(staging) else "")
        + " (the next install puts the previous one back first)",
        install_command(given, record),
    )
