"""User accounts as a root's ``etc/passwd`` and ``etc/group`` say (parsed, no NSS, so another root, e.g. a
container's seen from its host, reads the same way). install-service creates the service user; doctor checks it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    groups: tuple[str, ...]  # supplementary groups


def table(path: Path) -> list[list[str]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    return [line.split(":") for line in text.splitlines() if line and not line.startswith("#") and ":" in line]


def lookup(name: str, accounts_root: Path) -> Account | None:
    """The account ``name`` in ``accounts_root``'s passwd/group files, or None."""
    for row in table(accounts_root / "etc/passwd"):
        if len(row) >= 4 and row[0] == name:
            groups = tuple(g[0] for g in table(accounts_root / "etc/group") if len(g) >= 4 and name in g[3].split(","))
            return Account(name, int(row[2]), int(row[3]), groups)
    return None


def group_names(gids: Iterable[int], accounts_root: Path) -> list[str]:
    """Names of ``gids`` in ``accounts_root``'s group file (unknown gids are left out)."""
    by_gid = {int(g[2]): g[0] for g in table(accounts_root / "etc/group") if len(g) >= 3 and g[2].isdigit()}
    return sorted({by_gid[g] for g in gids if g in by_gid})


def group_ids(account: Account, accounts_root: Path) -> set[int]:
    """The account's primary and supplementary group ids."""
    named = set(account.groups)
    return {account.gid} | {
        int(g[2]) for g in table(accounts_root / "etc/group") if len(g) >= 3 and g[0] in named and g[2].isdigit()
    }
