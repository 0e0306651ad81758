"""The intent journal of a service change (`install-service`, `restart`): the host state it is about to change,
written before the first write, removed when the command is done (how a journal is written, read, removed and swept:
:mod:`kimi_serve.core.journal`). It records the unit file, ``previous.service``, the last-good and last-verify records
(bytes and modes), whether the API-key file existed (never its content), the folders not there yet, and whether the
unit was enabled.

A run killed at any step leaves the journal behind: the next `status` reports it, the next `install-service`,
`uninstall-service` or `restart` first rolls it back under the host lock. Every recorded file gets its bytes and mode
back (or is removed), an enablement it added is undone, a key file, folder or service account it created is removed
(``userdel``, only of an account carrying kimi-serve's comment), stray temporary files go, and systemd re-reads its
units (install-service and restart run again without the key in their environment keep and reuse a key file the
killed run created). A change of several units has one anchor journal, removed first at the end: journals left without
their anchor belong to a change that had changed every unit, and are only removed. Units systemd had already
restarted are not stopped: the next `restart` settles which unit runs.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.faults import checkpoint
from kimi_serve.core.files import chown_under, remove_under
from kimi_serve.core.journal import Journal, interrupted
from kimi_serve.profile.member import stop_order, unit_member
from kimi_serve.service import account
from kimi_serve.service.state import (
    STATE_DIR,
    UNIT_DIR,
    ServicePaths,
    write_atomic,
)
from kimi_serve.service.systemctl import Systemd

WANTS = f"{UNIT_DIR}/multi-user.target.wants"  # the template's WantedBy=multi-user.target
TIMER_WANTS = f"{UNIT_DIR}/timers.target.wants"  # the verify timer's WantedBy=timers.target
_JOURNAL = re.compile(r"^\.\.?(?P<name>[^.].*)\.intent\.json(?:\.\d+\.tmp)?$")  # .NAME.intent.json, its temp file


def intent_path(paths: ServicePaths) -> Path:
    return paths.state_dir.parent / f".{paths.state_dir.name}.intent.json"


def _journal(paths: ServicePaths) -> Journal:
    """The unit's journal (:class:`kimi_serve.core.journal.Journal`): 0600, written inside the root (no link followed
    on the way, a temp name planted as a link removed, never written through)."""
    return Journal(intent_path(paths), root=paths.root)


def wants_link(paths: ServicePaths) -> Path:
    return paths.root / WANTS / paths.unit


def _monitor_files(paths: ServicePaths) -> list[Path]:
    """The verify timer's units (service/monitor_units.py): written by the same change, so journalled with it."""
    from kimi_serve.service.monitor_units import ALERT_UNIT, monitor_names

    return [paths.unit_path(n) for n in (*monitor_names(paths.unit), ALERT_UNIT)]


def _timer(paths: ServicePaths) -> tuple[str, Path]:
    from kimi_serve.service.monitor_units import monitor_names

    timer = monitor_names(paths.unit)[1]
    return timer, paths.root / TIMER_WANTS / timer


def _rel(paths: ServicePaths, p: Path) -> str:
    return str(p.relative_to(paths.root))


def _missing_dirs(paths: ServicePaths, leaves: list[Path]) -> list[str]:
    out: list[str] = []
    for leaf in leaves:
        d = leaf
        while d != paths.root and d.is_relative_to(paths.root) and not d.exists():
            out.append(_rel(paths, d))
            d = d.parent
    return sorted(set(out), key=lambda s: -s.count("/"))  # deepest first, for rmdir


def _journalled_files(paths: ServicePaths) -> list[Path]:
    return [
        paths.unit_file,
        paths.previous_unit,
        paths.last_good_unit,
        paths.last_good_record,
        paths.last_verify_record,
        *_monitor_files(paths),
    ]


def _inside(paths: ServicePaths, rel: str, files: bool = False) -> None:
    """The journal's ``rel``, a path under the root, refused (exit 5) unless it is a plain relative path there,
    reached without a link out of the root, and (``files``) one of the files a change of this unit journals: a
    scratch ``--root``'s journal is its owner's to write, so recovery, as root, writes and removes nothing else."""
    target = paths.root / rel if isinstance(rel, str) else None
    known = target is not None and (not files or target in _journalled_files(paths))
    if not known or not rel or Path(rel).is_absolute() or ".." in Path(rel).parts:
        raise KimiServeError(
            f"the journal names {rel!r}, not a path of this unit under {paths.root}: refusing to roll back through it",
            where=str(intent_path(paths)),
            hint=f"inspect it and remove it (rm {intent_path(paths)}), then run the command again",
            exit_code=ExitCode.ENVIRONMENT,
        )
    paths.refuse_escape(paths.root / rel)


def snapshot(
    paths: ServicePaths, op: str, *, secret: Path | None, workdir: Path | None, user: tuple[str, Path] | None = None
) -> dict[str, Any]:
    files: dict[str, Any] = {}
    for p in _journalled_files(paths):
        try:
            files[_rel(paths, p)] = {"text": p.read_text(encoding="utf-8"), "mode": p.stat().st_mode & 0o7777}
        except FileNotFoundError:
            files[_rel(paths, p)] = None
    leaves = [
        paths.unit_file.parent,
        wants_link(paths).parent,
        _timer(paths)[1].parent,
        paths.state_dir,
        *(x for x in (workdir,) if x),
    ]
    if secret is not None:
        leaves.append(secret.parent)
    return {
        "op": op,
        "unit": paths.unit,
        "pid": os.getpid(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "files": files,
        "enabled": wants_link(paths).is_symlink(),
        "timer_enabled": _timer(paths)[1].is_symlink(),
        "secret": None if secret is None or secret.exists() else _rel(paths, secret),
        "created_dirs": _missing_dirs(paths, leaves),
        # the service account this change will create (user, the root of its user database), so a rollback removes it
        "created_user": {
            "name": user[0],
            "accounts_root": str(user[1]),
            "group": not account.has_group(user[0], user[1]),
        }
        if user and account.will_create(user[0], user[1])
        else None,
    }


@contextlib.contextmanager
def journalled(changes: Sequence[tuple[ServicePaths, dict[str, Any]]], op: str) -> Iterator[None]:
    """Write every unit's journal (``changes``: its paths and :func:`snapshot`'s keywords), run the block, remove the
    journals. A handled error (a KimiServeError: a failed systemctl step, say) also removes them, since the report
    says what was done; a kill, or a bug in kimi-serve (exit 70), leaves them for the next run to roll back.

    The first journal is the change's anchor: every other one names it, it is written first and removed first. Its
    removal is the one step that ends the change, so a kill while the others are removed leaves journals whose anchor
    is gone: the change was whole, and the next run only removes them (:func:`recover`) instead of rolling back some
    members and not others."""
    anchor = intent_path(changes[0][0])
    for paths, kw in changes:
        data = snapshot(paths, op, **kw)
        if intent_path(paths) != anchor:
            data["anchor"] = anchor.name
        _journal(paths).write(data, "service.journal.write")
        checkpoint(f"service.{op}.journal-written")
    try:
        yield
    except KimiServeError:
        _end([paths for paths, _ in changes], op)
        raise
    _end([paths for paths, _ in changes], op)


def _end(members: list[ServicePaths], op: str) -> None:
    for i, paths in enumerate(members):  # the anchor first: the change is done once it is gone
        _journal(paths).remove()
        if i < len(members) - 1:
            checkpoint(f"service.{op}.journal-removed")


def read_intent(paths: ServicePaths) -> dict[str, Any] | None:
    """The journal of ``paths``' unit; ``finished`` True when its change's anchor is gone (the change was whole)."""
    intent = _journal(paths).read()
    if intent is None:
        return None
    anchor = intent.get("anchor")
    intent["finished"] = bool(anchor) and not (intent_path(paths).parent / str(anchor)).exists()
    return intent


def describe(intent: dict[str, Any]) -> str:
    """The change, and what the next command does with it (the one that finishes or rolls it back)."""
    what = interrupted(intent, "kimi-serve")
    if intent.get("finished"):
        return f"{what}: it had changed every unit; the next install-service, uninstall-service or restart finishes it"
    return (
        f"{what}: the next install-service, uninstall-service or restart rolls it back (install-service or restart "
        "then makes the change again)"
    )


def sweep(paths: ServicePaths) -> None:
    """Remove what a killed atomic write of this unit's files left (``.NAME.*.tmp`` beside each file a change
    writes, and the journal's own temp file). Called under the root's lock: no other change of it is writing."""
    _journal(paths).sweep()
    for target in _journalled_files(paths):
        _drop_temps(target)


def _drop_temps(target: Path) -> None:
    """What killed atomic writes of ``target`` left beside it (``.NAME.*.tmp``)."""
    if target.parent.is_dir():
        for tmp in target.parent.glob(f".{target.name}.*.tmp"):
            tmp.unlink(missing_ok=True)


def journal_units(root: Path, base: str) -> list[str]:
    """The units of ``base`` (itself, or its members NAME-rN, NAME-router) with a journal or a journal's temp file
    under ``root``, in rollback order: itself, the router, then the replicas from the highest index (the reverse of
    the order a change journals them, so a change's anchor is rolled back last)."""
    stem, state = base.removesuffix(".service"), root / STATE_DIR
    found = {m["name"] for p in (state.iterdir() if state.is_dir() else ()) if (m := _JOURNAL.match(p.name))}
    members = {n: member for n in found if (member := unit_member(base, n)) is not None}
    ordered = sorted(members, key=lambda n: stop_order(*members[n]))
    return [f"{n}.service" for n in ([stem] if stem in found else []) + ordered]


def recover(paths: ServicePaths, systemd: Systemd, *, keep_secret: bool = False) -> str | None:
    """Roll back an interrupted change (see the module doc); None when there was none. ``keep_secret``: a key file
    the change created stays, owned by this process again (install-service and restart run again without the key in
    their environment reuse it)."""
    sweep(paths)
    intent = read_intent(paths)
    if intent is None:
        return None
    if intent.get("unreadable"):  # killed while the journal itself was written: nothing had changed yet
        _journal(paths).remove()
        return None
    if intent.get("finished"):  # the change was whole: only its journal is left
        _journal(paths).remove()
        return f"finished {interrupted(intent, 'kimi-serve')}: it had changed every unit"
    for rel in intent.get("files", {}):  # every path it names, before anything is changed
        _inside(paths, rel, files=True)
    for rel in [*([intent["secret"]] if intent.get("secret") else []), *intent.get("created_dirs", [])]:
        _inside(paths, rel)
    checkpoint("service.recover.start")
    if not intent.get("enabled") and wants_link(paths).is_symlink() and paths.unit_file.exists():
        systemd.disable(paths.unit)
    timer, timer_link = _timer(paths)
    timer_file = paths.unit_path(timer)
    if not intent.get("timer_enabled") and timer_link.is_symlink():
        if timer_file.exists():
            systemd.disable(timer)
        timer_link.unlink(missing_ok=True)
    for rel, saved in intent.get("files", {}).items():
        target = paths.root / rel
        _drop_temps(target)
        if saved is None:
            remove_under(paths.root, target)
        else:
            write_atomic(paths, target, saved["text"], int(saved["mode"]))
        checkpoint("service.recover.file")
    if intent.get("enabled") and not wants_link(paths).is_symlink() and paths.unit_file.exists():
        systemd.enable(paths.unit)
    if intent.get("timer_enabled") and not timer_link.is_symlink() and timer_file.exists():
        systemd.enable(timer)
    kept = None
    if intent.get("secret"):  # created by the killed run (never one that existed): remove it and its temp files
        secret = paths.root / intent["secret"]
        _drop_temps(secret)
        if keep_secret and secret.is_file():
            kept = secret
            with contextlib.suppress(OSError):  # the account it was handed to may be removed below
                chown_under(paths.root, secret, os.geteuid(), os.getegid(), "remove the link")
        else:
            remove_under(paths.root, secret)
    created = intent.get("created_user")
    # after the files the user owned (key file, folders below) are gone or back; a scratch root's journal removes
    # an account of that root's own user database only
    if created and (paths.root == Path("/") or Path(created["accounts_root"]) == paths.root):
        name, accounts_root = str(created["name"]), Path(created["accounts_root"])
        account.remove_created(name, accounts_root, systemd.runner, group=bool(created.get("group")))
        checkpoint("service.recover.user")
    if systemd.live:
        systemd.daemon_reload()
    _journal(paths).remove()
    for rel in intent.get("created_dirs", []):
        with contextlib.suppress(OSError):
            (paths.root / rel).rmdir()
    note = f"; the API-key file it created ({kept}) is kept for this run" if kept else ""
    return f"rolled back {interrupted(intent, 'kimi-serve')}: the unit files and records are as before it{note}"
