"""doctor: can ``service.user`` open the GPU device nodes and read the model? Judged from the permission bits as
that user (owner, primary and supplementary groups from the root's passwd/group files, then other), not by trying:
doctor runs as root, where every open succeeds. POSIX ACLs are not read (a file readable only through an ACL shows
as unreadable: the finding says which file)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kimi_serve.core.accounts import Account, group_ids, group_names, lookup
from kimi_serve.core.findings import FAIL, PASS, SKIP, WARN, Finding
from kimi_serve.profile.loader import Profile

GPU_NODES = "nvidia*"
READ, WRITE, EXEC = 4, 2, 1


def may(account: Account, gids: set[int], path: Path, want: int) -> bool:
    """Whether ``account`` (with group ids ``gids``) has the ``want`` bits (4 r, 2 w, 1 x) on ``path``."""
    st = path.stat()
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid == account.uid:
        bits = mode >> 6
    elif st.st_gid in gids:
        bits = mode >> 3
    else:
        bits = mode
    return bits & want == want


def _reachable(account: Account, gids: set[int], path: Path) -> Path | None:
    """The first directory above ``path`` the user cannot traverse, or None."""
    for parent in reversed(path.parents):
        if not may(account, gids, parent, EXEC):
            return parent
    return None


def _model_problem(account: Account, gids: set[int], directory: Path) -> str | None:
    blocked = _reachable(account, gids, directory)
    if blocked is not None:
        return f"cannot enter {blocked}"
    return listing_problem(account, gids, directory, str(directory))


def listing_problem(account: Account, gids: set[int], directory: Path, shown: str) -> str | None:
    """Why the user cannot list ``directory`` or read a file in it (``shown``: its name in the message), or None."""
    if not may(account, gids, directory, READ | EXEC):
        return f"cannot list {shown}"
    for entry in sorted(directory.iterdir()):
        if entry.is_file() and not may(account, gids, entry, READ):
            return f"cannot read {shown.rstrip('/')}/{entry.name}"
    return None


def service_user_findings(p: Profile, *, accounts_root: Path, dev_root: Path, gpus: bool) -> list[Finding]:
    """Findings ``service_user`` (it exists), ``service_user.devices`` and ``service_user.model``."""
    user = p.service.user
    where = p.where("service.user")

    def finding(code: str, status: str, message: str, fix: str = "", at: str = where) -> Finding:
        return Finding("doctor", code, status, message, fix, "" if status == PASS else at)

    if user == "root":
        fix = "set service.user: kimi-serve (install-service creates it)"
        return [finding("service_user", WARN, "the service runs as root: a compromised SGLang owns the host", fix)]
    account = lookup(user, accounts_root)
    if account is None:
        message = f"user {user} does not exist yet (install-service creates it); its access to the GPUs and the model"
        return [finding("service_user", SKIP, f"{message} is not checked")]
    gids = group_ids(account, accounts_root)
    found = [finding("service_user", PASS, f"service user {user} (uid {account.uid}) exists")]
    nodes = sorted(dev_root.glob(GPU_NODES)) if gpus else []
    closed = [n for n in nodes if n.is_char_device() and not may(account, gids, n, READ | WRITE)]
    if closed:
        message = f"{user} cannot open {closed[0]} (+{len(closed) - 1} more): CUDA finds no GPU"
        fix = f"usermod -a -G {_group_of(closed[0], accounts_root)} {user} (install-service does this)"
        found.append(finding("service_user.devices", FAIL, message, fix))
    elif nodes:
        found.append(finding("service_user.devices", PASS, f"{user} can open all {len(nodes)} /dev/{GPU_NODES} nodes"))
    dirs = [d for d in (p.model.path, p.speculative.draft_model_path if p.speculative.enabled else None) if d]
    for d in dirs:
        if not Path(d).is_dir():
            continue  # doctor's model check reports a missing directory
        problem = _model_problem(account, gids, Path(d))
        if problem:
            fix = f"make it readable: chmod -R o+rX {d} (or a group {user} is in)"
            message = f"{user} {problem}: SGLang cannot load the model"
            found.append(finding("service_user.model", FAIL, message, fix, p.where("model.path")))
        else:
            found.append(finding("service_user.model", PASS, f"{user} can read {d} (without owning it)"))
    return found


def _group_of(path: Path, accounts_root: Path) -> str:
    """The name of ``path``'s group in ``accounts_root``'s group file (the gid when it has none there)."""
    gid = os.stat(path).st_gid
    return next(iter(group_names([gid], accounts_root)), str(gid))
