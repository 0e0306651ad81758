"""One member of a deployment, the one home of what a member is (docs/architecture.md): its role and marker form,
endpoint, label, unit name and back, and the order members start and stop in. Pure: no I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Role(StrEnum):
    """What a member is: the one server, this host's node rank, a replica behind the router, or the router."""

    SINGLE = "single"
    RANK = "rank"
    REPLICA = "replica"
    ROUTER = "router"

    def marker(self, index: int) -> str:
        """The ``role=`` field of a unit's marker: ``replica:I``, ``rank:R``, ``router``; "" for the one server."""
        if self is Role.SINGLE:
            return ""
        return self.value if self is Role.ROUTER else f"{self.value}:{index}"


_MARKER_ROLE = re.compile(r"(replica|rank):([0-9]+)")
_UNIT_TAIL = re.compile(r"r([0-9]+)")


def parse_role(marker: str) -> tuple[Role, int] | None:
    """The marker's ``role=`` field back to (role, index): ``replica:1``, ``rank:0``, ``router``, "" (a single unit,
    and every unit written before deployments had members); None for a field this version does not know."""
    if not marker:
        return Role.SINGLE, 0
    if marker == Role.ROUTER.value:
        return Role.ROUTER, 0
    m = _MARKER_ROLE.fullmatch(marker)
    return (Role(m[1]), int(m[2])) if m else None


def label(role: Role, index: int) -> str:
    """How a report names a member: ``router``, ``replica 1``, ``rank 0``, ``single 0``."""
    return role.value if role is Role.ROUTER else f"{role.value} {index}"


def unit_name(base: str, role: Role, index: int) -> str:
    """A member's systemd unit for the deployment's ``base`` (NAME.service): the base itself for the one server or a
    rank, ``NAME-rI.service`` for a replica, ``NAME-router.service`` for the router."""
    stem = base.removesuffix(".service")
    if role is Role.REPLICA:
        return f"{stem}-r{index}.service"
    return f"{stem}-{Role.ROUTER.value}.service" if role is Role.ROUTER else base


def unit_member(base: str, unit: str) -> tuple[Role, int] | None:
    """The inverse of :func:`unit_name` for the units a deployment adds to ``base``: ``NAME-rI`` -> (replica, I),
    ``NAME-router`` -> (router, 0), with or without ``.service``; None for any other name (``base`` itself too)."""
    stem, name = base.removesuffix(".service"), unit.removesuffix(".service")
    if not name.startswith(f"{stem}-"):
        return None
    tail = name[len(stem) + 1 :]
    if tail == Role.ROUTER.value:
        return Role.ROUTER, 0
    m = _UNIT_TAIL.fullmatch(tail)
    return (Role.REPLICA, int(m[1])) if m else None


def start_order(role: Role, index: int) -> tuple[int, int]:
    """Sort key of the order members start (and are installed and journalled) in: the replicas, then the router."""
    return (1 if role is Role.ROUTER else 0), index


def stop_order(role: Role, index: int) -> tuple[int, int]:
    """The reverse of :func:`start_order` (a stop, removal or rollback): the router first, so clients stop arriving."""
    first, second = start_order(role, index)
    return -first, -second


@dataclass(frozen=True)
class Member:
    """One process of the deployment, as known without a launch (consumers attach their data: ``dict[Member, X]``)."""

    role: Role
    index: int  # replica index or node rank; 0 for the router and the one server
    endpoint: str  # where clients (or the router) reach it
    local: bool  # runs on the host the profile describes (False: on its router.workers host)

    @property
    def label(self) -> str:
        return label(self.role, self.index)

    @property
    def tag(self) -> str:
        """``replica0`` | ``router``: the label without its space (a log file's suffix, an echoed line's tag)."""
        return self.label.replace(" ", "")

    @property
    def title(self) -> str:
        """``replica 0 (127.0.0.1:30010)`` | ``router (127.0.0.1:30000)``: the label and where it listens."""
        return f"{self.label} ({self.endpoint})"

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"

    @property
    def marker(self) -> str:
        return self.role.marker(self.index)

    @property
    def serves_clients(self) -> bool:
        """The member clients reach (the verify timer checks it): the router, the one server, rank 0."""
        return self.role in (Role.ROUTER, Role.SINGLE) or (self.role is Role.RANK and self.index == 0)

    @property
    def start_order(self) -> tuple[int, int]:
        return start_order(self.role, self.index)

    def unit_name(self, base: str) -> str:
        return unit_name(base, self.role, self.index)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.label, "role": self.role.value, "endpoint": self.endpoint, "local": self.local}
