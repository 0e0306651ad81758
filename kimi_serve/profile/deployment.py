"""A deployment, planned once from a profile: its members and each member's launch, endpoint and unit name, and the
member clients reach. `render`, `check`, the units (:mod:`kimi_serve.service.member_units`), `up`, the Kubernetes
view (:mod:`kimi_serve.k8s.view`) and `verify --profile` all read it here; none builds the shape again.

- One server (``nodes.count`` 1, ``replicas`` 1): one member, ``single``.
- A multi-node profile: this host's rank (``nodes.rank``, or ``--node-rank R``: only ``--node-rank`` differs between
  the ranks' argv), one member ``rank`` R; rank 0 serves the API.
- A routed profile (``replicas`` > 1): every replica, then the router
  (:func:`kimi_serve.profile.router.build_router_launch`). Local replicas listen at ``server.port + i``, remote ones
  (``router.workers``) at their entry's port (:func:`kimi_serve.profile.topology.replicas`); a remote replica that is
  itself multi-node gets its own rank 0 (its ``router.workers`` host) as the rendezvous address.

A view of the profile (another rank, a replica's leader) is the profile with ``--set`` overrides applied in memory
(:func:`kimi_serve.profile.loader.with_sets`), never the YAML read again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kimi_serve.core.net import client_url, endpoint_url
from kimi_serve.core.resources import package_root
from kimi_serve.profile.launch import Launch, build_launch
from kimi_serve.profile.loader import Profile, with_sets
from kimi_serve.profile.member import Member, Role, label, unit_name
from kimi_serve.profile.router import build_router_launch
from kimi_serve.profile.topology import replicas, routed

_DEFAULT = "default"  # pythonpath: the folder holding kimi_serve (package_root)


@dataclass(frozen=True)
class Deployment:
    profile: Profile
    launch: Launch  # the server launch (replica 0 at server.port; on a multi-node profile this host's rank)
    members: tuple[Member, ...]  # in start order: the one server or rank; or every replica, then the router

    @property
    def routed(self) -> bool:
        return any(m.role is Role.ROUTER for m in self.members)

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

    @property
    def router_first(self) -> tuple[Member, ...]:
        """The members as `render` lists them: the router, then the replicas."""
        return (*self.members[-1:], *self.members[:-1]) if self.routed else self.members

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
        doc = self.launch.to_json()
        if (node := self.node()) is not None:
            doc["node"] = node
        if self.routed:
            doc["launches"] = [{**m.to_json(), **m.launch.to_json()} for m in self.router_first]
        return doc

    def text(self) -> str:
        """One shell line for a single launch; with a router, each launch under a ``#`` comment naming it."""
        if not self.routed:
            return self.launch.shell()
        lines = []
        for m in self.router_first:
            where = "this host" if m.local else "its own host"
            head = (
                f"# router on {m.endpoint} -> {', '.join(r.endpoint for r in self.replicas)}"
                if m.role is Role.ROUTER
                else f"# {m.label} on {m.endpoint} ({where})"
            )
            lines += [head, m.launch.shell()]
        return "\n".join(lines)


def deployment_targets(profile: Profile) -> tuple[tuple[str, str] | None, list[tuple[str, str]]]:
    """(name, URL) of every part `verify --profile` checks, no launch built: the router, None when the profile is not
    routed (a wildcard bind is reached on this machine's loopback); then each replica (one: the server, when the
    profile is not routed)."""
    router = (label(Role.ROUTER, 0), client_url(profile.router.host, profile.router.port)) if routed(profile) else None
    return router, [(label(Role.REPLICA, r.index), r.url) for r in replicas(profile)]


def running_targets(
    profile: Profile, runs: Sequence[Any]
) -> tuple[tuple[tuple[str, str] | None, list[tuple[str, str]]], Any]:
    """What `verify --profile` checks when a foreground `up` of ``profile`` runs (``runs``: kimi_serve.core.runs
    records): the newest running one's real endpoints, in :func:`deployment_targets`' form, and that run; else the
    profile's own targets and None. A record's shape is `up`'s (kimi_serve.up.locks.run_fields)."""
    mine = [r for r in runs if r.running and r.record.get("profile") == profile.name]
    if not mine:
        return deployment_targets(profile), None
    run = max(mine, key=lambda r: str(r.record.get("started")))
    router, parts = run.parts()
    if router is None:
        return (None, [(label(Role.REPLICA, 0), endpoint_url(str(run.record.get("endpoint"))))]), run
    reps = [(f"{Role.REPLICA.value} {x.get('index')}", endpoint_url(str(x.get("endpoint")))) for x in parts]
    return ((label(Role.ROUTER, 0), endpoint_url(str(router.get("endpoint")))), reps), run


def deployment_units(profile: Profile, base: str) -> tuple[str, ...]:
    """The units install-service writes on this host for a routed ``profile`` and its ``base`` unit (NAME.service):
    each local replica's (:meth:`Member.unit_name`), then the router's. No launch is built (`status` asks this of a
    profile whatever its other values)."""
    local = (unit_name(base, Role.REPLICA, r.index) for r in replicas(profile) if r.local)
    return (*local, unit_name(base, Role.ROUTER, 0))


def deployment_of(
    profile: Profile, launch: Launch, *, python: str | None = None, pythonpath: str | None = _DEFAULT
) -> Deployment:
    """The members of ``profile``'s deployment around its validated server ``launch``; each runs by ``python`` (the
    launch's interpreter unless given) with ``pythonpath`` (default: the folder holding kimi_serve; None: none)."""
    python = python or launch.argv[0]
    path = str(package_root()) if pythonpath == _DEFAULT else pythonpath
    if python != launch.argv[0] or pythonpath != _DEFAULT:
        launch = build_launch(profile, python, pythonpath=path)
    if not routed(profile):
        n = profile.nodes
        role, index = (Role.RANK, n.rank) if n.count > 1 else (Role.SINGLE, 0)
        return Deployment(profile, launch, (Member(role, index, launch, launch.endpoint, True),))
    members = []
    multinode = profile.nodes.count > 1
    for rep in replicas(profile):
        view = with_sets(profile, f"nodes.leader_host={rep.host}") if multinode and not rep.local else profile
        own = build_launch(view, python, pythonpath=path, port=rep.port)
        members.append(Member(Role.REPLICA, rep.index, own, rep.endpoint, rep.local))
    router = build_router_launch(profile, python, pythonpath=path)
    return Deployment(profile, launch, (*members, Member(Role.ROUTER, 0, router, router.endpoint, True)))
