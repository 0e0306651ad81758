"""What `render` shows for a whole deployment: the server launch, one rank's view (``--node-rank``), and for a
replicated profile the router's launch and each replica's (validated by the fast layers first).

A single-host, single-replica profile renders one launch, exactly as before. A multi-node profile renders this
host's rank (``nodes.rank``, or ``--node-rank R``: only ``--node-rank`` differs between the ranks' argv). A routed
profile (``replicas`` > 1) renders the router (:func:`kimi_serve.profile.router.build_router_launch`) and every
replica: local ones at ``server.port + i``, remote ones (``router.workers``) at their entry's port; a replica that is
itself multi-node gets its own rank 0 (its ``router.workers`` host) as the rendezvous address.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kimi_serve.check.launch import validated_launch
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.profile.launch import Launch, build_launch
from kimi_serve.profile.loader import Profile, display_path, load_profile
from kimi_serve.profile.router import build_router_launch
from kimi_serve.profile.topology import replicas, routed


@dataclass(frozen=True)
class Part:
    name: str  # "router", "replica 0"
    role: str  # "router" | "replica"
    endpoint: str  # where clients (or the router) reach it
    local: bool  # runs on the host the profile describes (False: on the router.workers host)
    launch: Launch

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "endpoint": self.endpoint,
            "local": self.local,
            **self.launch.to_json(),
        }


@dataclass(frozen=True)
class RenderPlan:
    profile: Profile
    launch: Launch  # the server launch (replica 0 at server.port; on a multi-node profile this host's rank)
    parts: tuple[Part, ...]  # router + replicas when routed, else empty

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
        doc = self.launch.to_json()
        if (node := self.node()) is not None:
            doc["node"] = node
        if self.parts:
            doc["launches"] = [p.to_json() for p in self.parts]
        return doc

    def text(self) -> str:
        """One shell line for a single launch; with a router, each launch under a ``#`` comment naming it."""
        if not self.parts:
            return self.launch.shell()
        lines = []
        for p in self.parts:
            where = "this host" if p.local else "its own host"
            head = (
                f"# router on {p.endpoint} -> {', '.join(r.endpoint for r in replicas(self.profile))}"
                if p.role == "router"
                else f"# {p.name} on {p.endpoint} ({where})"
            )
            lines += [head, p.launch.shell()]
        return "\n".join(lines)


def _rank_profile(profile: Profile, node_rank: int) -> Profile:
    n = profile.nodes
    where = display_path(profile.source)
    if n.count <= 1:
        raise KimiServeError(
            f"--node-rank {node_rank}: profile {profile.name!r} is single-node (nodes.count 1)",
            where=where,
            hint="drop --node-rank, or set nodes.count and nodes.leader_host",
            exit_code=ExitCode.USAGE,
        )
    if node_rank >= n.count:
        raise KimiServeError(
            f"--node-rank {node_rank}: nodes.count is {n.count}, so the ranks are 0..{n.count - 1}",
            where=where,
            hint=f"pass --node-rank 0..{n.count - 1}",
            exit_code=ExitCode.USAGE,
        )
    return _with(profile, f"nodes.rank={node_rank}")


def _with(profile: Profile, *sets: str) -> Profile:
    return load_profile(profile.ref or str(profile.source), (*profile.overrides, *sets))


def render_plan(profile: Profile, node_rank: int | None = None) -> RenderPlan:
    """The validated launches of ``profile`` (one-line error, exit 2, for the first failing fast rule or a
    ``node_rank`` outside the profile's nodes)."""
    if node_rank is not None:
        profile = _rank_profile(profile, node_rank)
    launch = validated_launch(profile)
    if not routed(profile):
        return RenderPlan(profile, launch, ())
    python = launch.argv[0]
    from kimi_serve.core.resources import package_root

    root = str(package_root())
    router = build_router_launch(profile, python, pythonpath=root)
    parts = [Part("router", "router", router.endpoint, True, router)]
    multinode = profile.nodes.count > 1
    for rep in replicas(profile):
        view = _with(profile, f"nodes.leader_host={rep.host}") if multinode and not rep.local else profile
        parts.append(
            Part(
                f"replica {rep.index}",
                "replica",
                rep.endpoint,
                rep.local,
                build_launch(view, python, pythonpath=root, port=rep.port),
            )
        )
    return RenderPlan(profile, launch, tuple(parts))
