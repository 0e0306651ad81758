"""Paths the service user is made owner of (``service.working_directory``, ``server.api_key_file``) must be its own:
never kimi-serve's state root (the "last good" records rollback trusts), a systemd unit directory (units root runs),
/etc, /usr, /, or the model (weights the server would then be able to swap). Checked on the profile by `check`
(:func:`rule_owned_paths`) and again by install-service right before the chown (:func:`owned_path_problem`), with
symlinks resolved inside the install root.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from kimi_serve.check.rule_kit import bad, ok
from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.files import link_refused, refuse_escape, resolve_in
from kimi_serve.core.findings import Finding
from kimi_serve.core.settings import DEFAULT_STATE_ROOT, state_root
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile

SERVER_HOME = str(DEFAULT_STATE_ROOT / "server")  # the one place under a state root that is the server's (ROOT/server)
KEY_HOME = "/etc/kimi-serve"  # the one place under /etc for the key file
UNIT_TREES = ("/etc/systemd", "/run/systemd", "/usr/lib/systemd", "/lib/systemd")
SYSTEM_TREES = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/boot", "/dev", "/proc", "/sys")
OWNED_KEYS = ("service.working_directory", "server.api_key_file")


def _within(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree.rstrip("/") + "/")


def owned_path_problem(p: Profile, key: str, root: Path = Path("/")) -> str | None:
    """Why the service user must not own the path at ``key`` (under ``root``), or None."""
    value = p.service.working_directory if key == OWNED_KEYS[0] else p.server.api_key_file
    if not value:
        return None
    path = resolve_in(root, value)
    shown = value if path == value else f"{value} (resolves to {path})"
    states = sorted({str(DEFAULT_STATE_ROOT), str(state_root())})
    models = [d for d in (p.model.path, p.speculative.draft_model_path) if d]
    guarded = [
        *((t, "kimi-serve's state root (its records, locks, the last good unit)") for t in states),
        *((t, "a systemd unit directory (units root runs)") for t in UNIT_TREES),
        *((t, "a system directory") for t in SYSTEM_TREES),
        *((resolve_in(root, m), "the model") for m in models),
    ]
    if path == "/":
        return f"{shown} is / itself"
    for tree, what in guarded:
        if _within(tree, path):
            return f"{shown} is or contains {tree}, {what}"
        # the exceptions: the server's own home under the state root, the key file's directory under /etc
        home = f"{tree}/server" if tree in states else None
        keys = KEY_HOME if tree == "/etc" and key == OWNED_KEYS[1] else None
        if _within(path, tree) and not ((home and _within(path, home)) or (keys and path.startswith(keys + "/"))):
            return f"{shown} is inside {tree}, {what}"
    return None


UNIT_STEM_MAX = 200  # systemd's names end at 255 characters: room for -router, -rN, -verify.timer
UNIT_NAME_FIX = "use letters, digits and :_.- only, beginning with a letter or digit, e.g. sglang-kimi"
_UNIT_NAME = re.compile(r"[A-Za-z0-9:_.\\-]+")  # systemd's unit-name characters, no '@' (templates)


def unit_name_problem(name: str) -> str | None:
    """Why ``name`` (a unit name without ``.service``) cannot name a unit, or None. systemd's rules (its characters,
    not a template, not too long), and a plain path component that is no option: it names the unit file and the
    records' folder (``var/lib/kimi-serve/service/NAME``, which uninstall removes), so ``.``, ``..``, a ``/`` or a
    leading ``-`` or ``.`` would name another folder or read as an option to systemctl."""
    if not name:
        return "it is empty"
    if len(name) > UNIT_STEM_MAX:
        return f"it is longer than {UNIT_STEM_MAX} characters"
    if not _UNIT_NAME.fullmatch(name):
        return "it has a character other than letters, digits and :_.-"
    if name.startswith((".", "-")):
        return "it begins with '.' or '-' (a hidden file, '.', '..', or an option to systemctl)"
    return None


def owned_path_fix(key: str) -> str:
    default = SERVER_HOME if key == OWNED_KEYS[0] else f"{KEY_HOME}/secrets.yaml"
    return f"set {key} to a path of the service's own, e.g. {default} (service.user is made its owner)"


def refuse_owned_paths(p: Profile, root: Path) -> None:
    """install-service's guard: a one-line error (exit 2) before anything is written or chowned; exit 5 when the
    path under ``root`` is a symbolic link, or a link on the way leads out of ``root`` (root never follows one)."""
    for key in OWNED_KEYS:
        problem = owned_path_problem(p, key, root)
        if problem:
            raise KimiServeError(f"{problem}: service.user would own it", where=p.where(key), hint=owned_path_fix(key))
    for key in OWNED_KEYS:
        value = p.service.working_directory if key == OWNED_KEYS[0] else p.server.api_key_file
        if not value:
            continue
        path = root / value.lstrip("/")
        fix = f"remove the link, or set {key} to the real path (service.user is made its owner)"
        refuse_escape(root, path, fix)
        if path.is_symlink():
            raise link_refused(path, f"{key} is a symbolic link (to {os.readlink(path)})", fix)


def rule_owned_paths(p: Profile, _: Launch) -> Iterator[Finding]:
    for key in OWNED_KEYS:
        problem = owned_path_problem(p, key)
        if problem:
            yield bad(p, key, f"{problem}: service.user would own it", owned_path_fix(key))
    problem = unit_name_problem(p.service.unit_name.removesuffix(".service"))
    if problem:
        yield bad(p, "service.unit_name", f"invalid unit name: {problem}", UNIT_NAME_FIX)
    yield ok("owned_paths", "the service user owns only its own working directory and key file")
