"""A deployment, planned once from a profile: its members, each one's launch, and the member clients reach (every
consumer reads the shape here). One server: one member, ``single``. Multi-node: this host's rank R (rank 0 serves the
API). Routed (``replicas`` > 1): every replica, then the router; a remote replica that is itself multi-node gets its
``router.workers`` host as the rendezvous address. A view of the profile (another rank, a replica's leader) is the
profile with ``--set`` overrides applied in memory (:func:`kimi_serve.profile.loader.with_sets`), never re-read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kimi_serve.core.net import endpoint_url, host_port
from kimi_serve.core.report import to_json
from kimi_serve.core.resources import package_root
from kimi_serve.profile.launch import Launch, build_launch
from kimi_serve.profile.loader import Profile, with_sets
from kimi_serve.profile.member import Member, Role
from kimi_serve.profile.router import build_router_launch
from kimi_serve.profile.topology import replicas, routed

_DEFAULT = "default"  # pythonpath: the folder holding kimi_serve (package_root)


@dataclass(frozen=True)
class Deployment:
    profile: Profile
    launch: Launch  # the server launch (replica 0 at server.port; on a multi-node profile this host's rank)
    launches: Mapping[Member, Launch]  # each member's, in start order: the one server or rank; or the replicas, router

    @property
    def members(self) -> tuple[Member, ...]:
        return tuple(self.launches)

    @property
    def routed(self) -> bool:
        return self.router is not None

    @property
    def router(self) -> Member | None:
        return next((m for m in self.members if m.role is Role.ROUTER), None)

    @property
    def replicas(self) -> list[Member]:
        return [m for m in self.members if m.role is Role.REPLICA]

    @property
    def front(self) -> Member | None:
        """The member clients reach; None on a rank >= 1 (it serves no API)."""
        return next((m for m in self.members if m.serves_clients), None)

    def node(self) -> dict[str, Any] | None:
        n = self.profile.nodes
        if n.count <= 1:
            return None
        return {
            "rank": n.rank,
            "count": n.count,
            "leader": f"{n.leader_host}:{n.leader_port}",
            "serves_api": n.rank == 0,
        }

    def to_json(self) -> dict[str, Any]:
        """What `render --json` prints (docs/json.md)."""
        doc: dict[str, Any] = to_json(self.launch)
        if (node := self.node()) is not None:
            doc["node"] = node
        if self.routed:
            doc["launches"] = [{**m.to_json(), **to_json(self.launches[m])} for m in router_first(self.members)]
        return doc

    def text(self) -> str:
        """One shell line for a single launch; with a router, each launch under a ``#`` comment naming it."""
        if not self.routed:
            return self.launch.shell()
        lines = []
        for m in router_first(self.members):
            where = "this host" if m.local else "its own host"
            head = (
                f"# router on {m.endpoint} -> {', '.join(r.endpoint for r in self.replicas)}"
                if m.role is Role.ROUTER
                else f"# {m.label} on {m.endpoint} ({where})"
            )
            lines += [head, self.launches[m].shell()]
        return "\n".join(lines)


def members_of(profile: Profile) -> tuple[Member, ...]:
    """The members of ``profile``'s deployment in start order, no launch built (for `status` and `verify --profile`)."""
    if not routed(profile):
        n = profile.nodes
        role, index = (Role.RANK, n.rank) if n.count > 1 else (Role.SINGLE, 0)
        return (Member(role, index, host_port(profile.server.host, profile.server.port), True),)
    reps = [Member(Role.REPLICA, r.index, r.endpoint, r.local) for r in replicas(profile)]
    return (*reps, Member(Role.ROUTER, 0, host_port(profile.router.host, profile.router.port), True))


def router_first(members: Sequence[Member]) -> tuple[Member, ...]:
    """``members`` as `render` lists them and `verify --profile` checks them: the router, then the others."""
    return (*(m for m in members if m.role is Role.ROUTER), *(m for m in members if m.role is not Role.ROUTER))


def client_urls(profile: Profile) -> dict[Member, str]:
    """Where `verify --profile` and `chat` reach each member, router first (a wildcard bind reached on loopback)."""
    return {m: endpoint_url(m.endpoint) if m.role is Role.ROUTER else m.url for m in router_first(members_of(profile))}


def running_urls(profile: Profile, runs: Sequence[Any]) -> tuple[dict[Member, str], Any]:
    """The newest running foreground `up` of ``profile`` among ``runs`` (kimi_serve.core.runs): its real endpoints in
    :func:`client_urls`' form, and that run; else the profile's own and None."""
    mine = [r for r in runs if r.running and r.record.get("profile") == profile.name]
    if not mine:
        return client_urls(profile), None
    run = max(mine, key=lambda r: str(r.record.get("started")))
    return {m: endpoint_url(m.endpoint) for m in run_members(run)}, run


def run_members(run: Any) -> tuple[Member, ...]:
    """The members a foreground `up` runs, from its run record (kimi_serve.up.locks.run_fields), the router first.
    Odd fields are kept as they read, never raised on."""
    router, parts = run.parts()
    if router is None:
        return (Member(Role.SINGLE, 0, str(run.record.get("endpoint")), True),)
    reps = [(x.get("index"), str(x.get("endpoint"))) for x in parts]
    return (
        Member(Role.ROUTER, 0, str(router.get("endpoint")), True),
        *(Member(Role.REPLICA, x if isinstance(x, int) else i, e, True) for i, (x, e) in enumerate(reps)),
    )


def deployment_of(
    profile: Profile, launch: Launch, *, python: str | None = None, pythonpath: str | None = _DEFAULT
) -> Deployment:
    """:func:`members_of` with their launches, around the validated server ``launch``; each runs by ``python``
    (default: the launch's) with ``pythonpath`` (default: the folder holding kimi_serve; None: none)."""
    python = python or launch.argv[0]
    path = str(package_root()) if pythonpath == _DEFAULT else pythonpath
    if python != launch.argv[0] or pythonpath != _DEFAULT:
        launch = build_launch(profile, python, pythonpath=path)
    members = members_of(profile)
    if not routed(profile):
        return Deployment(profile, launch, {members[0]: launch})
    launches: dict[Member, Launch] = {}
    multinode = profile.nodes.count > 1
    for m, rep in zip(members, replicas(profile), strict=False):  # every replica; the router is the last member
        view = with_sets(profile, f"nodes.leader_host={rep.host}") if multinode and not rep.local else profile
        launches[m] = build_launch(view, python, pythonpath=path, port=rep.port)
    launches[members[-1]] = build_router_launch(profile, python, pythonpath=path)
    return Deployment(profile, launch, launches)
