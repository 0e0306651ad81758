"""Can the unit start? What a unit runs and reads, judged as its own ``User=`` inside its own sandbox before it is
installed (a unit whose interpreter its user cannot execute starts with 203/EXEC, loops on Restart= and is rolled back
to a unit with the same flaw). Judged from the files, not by trying (the installer runs as root):

- hidden by the sandbox: ``PrivateTmp=yes`` empties /tmp and /var/tmp, ``ProtectHome=yes|tmpfs`` /home, /root and
  /run/user; a path is checked as written and resolved (a venv's ``bin/python`` often links into pyenv under /root);
- out of reach: every directory on the way needs ``x`` for the user, the file ``x`` (a command) or ``r`` (the
  model's files), read from the bits as :mod:`kimi_serve.host.service_user` does; under the hardened sandbox root has
  no capabilities (empty ``CapabilityBoundingSet=``), so root is judged by the bits too;
- a ``#!`` script's interpreter (``kimi-serve`` itself, for the start gate) is checked the same way.

A path missing under the root is not judged (check's host layer reports it; an offline ``--root`` install names files
only the target host has).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kimi_serve.core.accounts import Account, group_ids, lookup
from kimi_serve.core.files import resolve_in
from kimi_serve.core.findings import FAIL, Finding
from kimi_serve.host.service_user import EXEC, listing_problem, may

HOME_TREES = ("/home", "/root", "/run/user")
TMP_TREES = ("/tmp", "/var/tmp")
RUN, LOAD, ENTER = "run", "load", "enter"  # a command to execute, a directory of files to read, a directory to cd into


@dataclass(frozen=True)
class Need:
    """One thing the unit must reach: ``role`` says what it is (``interpreter``, ``start gate``, ``model``)."""

    role: str
    path: str
    kind: str  # RUN | LOAD | ENTER
    where: str = ""  # the profile key it comes from


@dataclass(frozen=True)
class Sandbox:
    """The sandbox settings that decide what the unit sees, from its ``(setting, value)`` lines."""

    protect_home: str = "no"  # yes | read-only | tmpfs | no (systemd's default)
    private_tmp: bool = False
    capabilities: bool = True  # False under CapabilityBoundingSet= (empty): root has no DAC override

    @classmethod
    def from_lines(cls, lines: Iterable[tuple[str, str]]) -> Sandbox:
        settings = dict(lines)
        return cls(
            protect_home=settings.get("ProtectHome", "no"),
            private_tmp=settings.get("PrivateTmp", "no") == "yes",
            capabilities=settings.get("CapabilityBoundingSet") != "",
        )


def _within(path: str, trees: Iterable[str]) -> str | None:
    return next((t for t in trees if path == t or path.startswith(t + "/")), None)


def _hidden(path: str, box: Sandbox) -> str | None:
    """The setting that hides ``path`` from the unit, or None."""
    tree = _within(path, TMP_TREES)
    if tree and box.private_tmp:
        return f"PrivateTmp=yes gives the unit an empty {tree}"
    tree = _within(path, HOME_TREES)
    if tree and box.protect_home in ("yes", "tmpfs"):
        return f"ProtectHome={box.protect_home} gives the unit an empty {tree}"
    return None


def sandbox_hides(path: str) -> str | None:
    """The setting of kimi-serve's hardened unit (``ProtectHome=yes``, ``PrivateTmp=yes``) that hides ``path`` from
    it, or None: for what the unit loads without naming it (a library a search path finds)."""
    return _hidden(path, Sandbox(protect_home="yes", private_tmp=True))


def _blocked(root: Path, link: str, path: str, account: Account, gids: set[int], kind: str) -> str | None:
    """Why ``account`` cannot reach ``path`` (real, under ``root``; ``link``: the directory the need names it in, with
    its own links resolved) for ``kind``, or None."""
    here = root / path.lstrip("/")
    on_the_way = [*Path(link).parents, Path(link), *Path(path).parents]
    for parent in dict.fromkeys(d for d in on_the_way if str(d) != "/"):  # "/" itself: open on every booted host
        if not may(account, gids, root / str(parent).lstrip("/"), EXEC):
            return f"cannot enter {parent}"
    if kind in (RUN, ENTER) and not may(account, gids, here, EXEC):
        return f"cannot {'execute' if kind == RUN else 'enter'} {path}"
    return listing_problem(account, gids, here, path) if kind == LOAD else None


def _interpreter(root: Path, real: str) -> str | None:
    """The absolute interpreter of a ``#!`` script at ``real`` (None for a binary or ``#!/usr/bin/env``'s PATH)."""
    try:
        with (root / real.lstrip("/")).open("rb") as f:
            first = f.readline(256)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    return words[0] if words and words[0].startswith("/") and not words[0].endswith("/env") else None


def _problem(root: Path, need: Need, box: Sandbox, account: Account, gids: set[int], depth: int = 0) -> str | None:
    real = resolve_in(root, need.path)
    if not (root / real.lstrip("/")).exists():
        return None  # not judged (the module's docstring)
    shown = need.path if real == need.path else f"{need.path} (resolves to {real})"
    for path in dict.fromkeys((need.path, real)):
        why = _hidden(path, box)
        if why:
            return f"the {need.role} {shown} is hidden from the unit: {why}"
    judged = None if account.uid == 0 and box.capabilities else account  # root with capabilities reads anything
    link = resolve_in(root, str(Path(need.path).parent))
    why = _blocked(root, link, real, judged, gids, need.kind) if judged is not None else None
    if why:
        return f"the {need.role} {shown} is out of reach: {account.name or 'the service user'} {why}"
    script = _interpreter(root, real) if need.kind == RUN and depth < 4 else None
    if script:
        inner = Need(f"interpreter of {need.path}", script, RUN, need.where)
        return _problem(root, inner, box, account, gids, depth + 1)
    return None


def reach_findings(
    needs: Iterable[Need],
    box: Sandbox,
    user: str,
    *,
    root: Path = Path("/"),
    layer: str = "host",
) -> list[Finding]:
    """One failed ``unit.reach`` finding per need the unit's ``user`` cannot reach under ``box`` (none: all fine).
    ``root`` is the system the unit runs on, its files and its passwd/group files. A user that does not exist yet
    (install-service creates it) owns nothing and is in no group."""
    account = lookup(user, root) or Account(user, -1, -1, ())
    gids = group_ids(account, root) if account.uid >= 0 else set()
    found = []
    for need in needs:
        problem = _problem(root, need, box, account, gids)
        if problem:
            found.append(
                Finding(layer, "unit.reach", FAIL, f"{problem}; the unit cannot start", _fix(need), need.where)
            )
    return found


def _fix(need: Need) -> str:
    if need.kind == RUN:
        return (
            "install it where the service user can run it: a venv outside /root, /home and /tmp, made from a Python "
            "that is outside them too (e.g. /usr/bin/python3 -m venv /opt/kimi-serve)"
        )
    return "move it outside /root, /home and /tmp, readable by the service user (chmod -R o+rX, or a group it is in)"
