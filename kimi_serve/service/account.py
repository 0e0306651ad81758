"""The service user: a dedicated system account (``service.user``, default ``kimi-serve``) that install-service
creates if absent (``useradd --system``), adds to the groups owning the GPU device nodes (``/dev/nvidia*``), and makes
owner of the API-key file and the working directory. The model directory is only read, never chowned.

Accounts are read from ``ACCOUNTS_ROOT/etc/passwd`` and ``/etc/group`` (parsed, no NSS), and changed with
``useradd``/``usermod`` through a :class:`~kimi_serve.core.proc.Runner`, with ``--prefix ACCOUNTS_ROOT`` when that is
not ``/`` (an offline ``--root`` install, or a container's root seen from its host). Tests inject both.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from kimi_serve.core.accounts import Account, group_names, lookup, table
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.files import chown_under
from kimi_serve.core.proc import Runner

ACCOUNT_TIMEOUT = 60.0
GPU_NODES = "nvidia*"  # /dev/nvidia0..7, nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset
NOLOGIN = "/usr/sbin/nologin"
COMMENT = "kimi-serve (SGLang service)"  # the GECOS field of an account kimi-serve created: what a rollback may remove


def device_gids(dev_root: Path) -> set[int]:
    """Groups owning the GPU device nodes (none on a machine without NVIDIA's driver); root's group 0 is left out."""
    gids = set()
    for node in sorted(dev_root.glob(GPU_NODES)):
        try:
            gid = node.stat().st_gid
        except OSError:
            continue
        if gid != 0:
            gids.add(gid)
    return gids


def roots(install_root: Path, live: bool, accounts_root: Path) -> tuple[Path, Path]:
    """(where the user database is, where the GPU device nodes are): the install root offline (no devices there),
    else ``accounts_root`` ($KIMI_SERVE_ACCOUNTS_ROOT, default /: another one is a container's root) and /dev."""
    return (accounts_root, Path("/dev")) if live else (install_root, install_root / "dev")


def _prefix(accounts_root: Path) -> list[str]:
    return [] if accounts_root == Path("/") else ["--prefix", str(accounts_root)]


def _must(runner: Runner, argv: list[str]) -> None:
    done = runner(argv, timeout=ACCOUNT_TIMEOUT)
    if not done.ok:
        raise KimiServeError(
            done.describe(),
            where=" ".join(argv[:1] + argv[-1:]),
            hint="create the user by hand (useradd --system NAME), or set service.user",
            exit_code=ExitCode.ENVIRONMENT,
        )


def has_user_db(accounts_root: Path) -> bool:
    """Whether ``accounts_root`` holds a user database to change (an offline ``--root`` may be a bare unit tree)."""
    return accounts_root == Path("/") or (accounts_root / "etc/passwd").is_file()


def planned(user: str, accounts_root: Path, dev_root: Path) -> list[str]:
    """What :func:`ensure` would do, for ``--dry-run``."""
    if user == "root":
        return []
    if not has_user_db(accounts_root):
        return [f"leave accounts alone: {accounts_root} has no etc/passwd (create user {user} on the target system)"]
    found = lookup(user, accounts_root)
    actions = [] if found else [f"create system user {user} (useradd --system, no login shell)"]
    missing = [g for g in group_names(device_gids(dev_root), accounts_root) if not found or g not in found.groups]
    if missing:
        actions.append(f"add {user} to {', '.join(missing)} (the groups owning /dev/{GPU_NODES})")
    return [*actions, f"make {user} the owner of the key file and the working directory (after creating them)"]


def ensure(
    user: str, home: str, *, accounts_root: Path, dev_root: Path, runner: Runner
) -> tuple[Account | None, list[str]]:
    """Create ``user`` if absent and add it to the GPU device groups; returns the account and what was done.
    root is used as it is (no account changes)."""
    if user == "root" or not has_user_db(accounts_root):  # an offline root without a user database: nothing to change
        return None, []
    done: list[str] = []
    if lookup(user, accounts_root) is None:
        group = ["--gid", user] if has_group(user, accounts_root) else ["--user-group"]
        _must(
            runner,
            [
                "useradd",
                *_prefix(accounts_root),
                "--system",
                *group,
                "--no-create-home",
                "--home-dir",
                home,
                "--shell",
                NOLOGIN,
                "--comment",
                COMMENT,
                user,
            ],
        )
        done.append(f"create system user {user}")
    found = lookup(user, accounts_root)
    if found is None:
        raise KimiServeError(
            f"user {user} is still missing after useradd",
            where="service.user",
            hint=f"check {accounts_root / 'etc/passwd'}",
            exit_code=ExitCode.ENVIRONMENT,
        )
    missing = [g for g in group_names(device_gids(dev_root), accounts_root) if g not in found.groups]
    if missing:
        _must(runner, ["usermod", *_prefix(accounts_root), "--append", "--groups", ",".join(missing), user])
        done.append(f"add {user} to {', '.join(missing)}")
        found = lookup(user, accounts_root) or found
    return found, done


def will_create(user: str, accounts_root: Path) -> bool:
    """Whether :func:`ensure` would create ``user`` (absent from a user database kimi-serve may change)."""
    return user != "root" and has_user_db(accounts_root) and lookup(user, accounts_root) is None


def has_group(name: str, accounts_root: Path) -> bool:
    return any(g and g[0] == name for g in table(accounts_root / "etc/group"))


def remove_created(user: str, accounts_root: Path, runner: Runner, *, group: bool) -> str | None:
    """Undo :func:`ensure`'s ``useradd`` for a rolled-back install: ``userdel`` of an account that carries kimi-serve's
    comment (anything else, an account the operator made meanwhile, is kept), and with ``group`` (useradd made the
    user's own group: none of that name existed) ``groupdel`` of that group when no one else is in it (userdel
    leaves it where login.defs has no USERGROUPS_ENAB). What was done, or None."""
    row = next((r for r in table(accounts_root / "etc/passwd") if r and r[0] == user), None)
    if row is None or len(row) < 5 or row[4] != COMMENT:
        return None
    if not runner(["userdel", *_prefix(accounts_root), user], timeout=ACCOUNT_TIMEOUT).ok:
        return None
    own = next((g for g in table(accounts_root / "etc/group") if g and g[0] == user), None)
    if group and own is not None and (len(own) < 4 or not own[3].strip()):
        runner(["groupdel", *_prefix(accounts_root), user], timeout=ACCOUNT_TIMEOUT)
    return f"removed system user {user} (created by the interrupted install)"


def hand_over(account: Account | None, paths: Iterable[Path], root: Path) -> list[str]:
    """Make ``account`` the owner of each existing path (the key file, the working directory; inside ``root``); not
    recursive. The path itself, reached from ``root`` without following a link at any component, never what a link
    there points to (exit 5 naming it: :func:`kimi_serve.core.files.chown_under`)."""
    if account is None:
        return []
    done = []
    for path in paths:
        fix = "remove the link and set the profile's path to the real file or directory (service.user owns it)"
        if chown_under(root, path, account.uid, account.gid, fix):
            done.append(f"chown {account.name} {path}")
    return done
