"""A deployment as systemd units (docs/scale-out.md, "As services"): which units a profile needs on this host and
how each one is gated, ordered and stopped. Pure rendering; :mod:`kimi_serve.service.fleet` installs them.

- ``replicas: N`` (local replicas): one plain unit per replica, ``NAME-r0.service``, ``NAME-r1.service``, ... (each its
  own ``--port``, marker, last-good record and rollback), and ``NAME-router.service`` (SGLang's router) with
  ``Wants=`` + ``After=`` on every local replica: a boot starts the replicas first and the router once their
  contract checks are done, and a stop of the deployment stops the router first. Not ``BindsTo=``/``Requires=``: a
  replica restarting (the rolling restart) must not take the router down with it. Plain units rather than a template
  (``NAME@.service``): a template shares one text, and a rolling restart must be able to put back one replica's
  last good unit while the other runs the new one.
- ``nodes.count > 1``: the one unit of THIS host's rank (``nodes.rank``). Rank 0 is gated on the contract (as a single
  unit); a rank >= 1 serves no API, so its ExecStartPost is ``kimi-serve wait-joined``
  (:mod:`kimi_serve.service.gates`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kimi_serve.core.errors import KimiServeError
from kimi_serve.profile.launch import Launch, build_launch
from kimi_serve.profile.loader import Profile
from kimi_serve.profile.router import build_router_launch
from kimi_serve.profile.topology import Replica, replicas, routed
from kimi_serve.service.state import UNIT_DIR, read_text
from kimi_serve.service.timeouts import START_SLACK_SEC
from kimi_serve.service.unit import (
    RenderedUnit,
    UnitContext,
    UnitShape,
    parse_marker,
    render_unit,
    verify_argv,
)

ROUTER = "router"
_REPLICA = re.compile(r"^(?P<base>.+)-r(?P<index>\d+)\.service$")
ROUTER_STOP = (
    "SIGTERM to the router's main process: it stops taking requests and drains in flight ones itself.",
    "Whatever is left after TimeoutStopSec gets SIGKILL.",
)
RANK_STOP = (
    "Stop RANK 0 FIRST: its shutdown broadcast (ShutdownReq) is what ends the schedulers of every rank. A",
    "rank >= 1 ignores SIGTERM while it waits for that broadcast (SGLang engine.py), so stopped alone it",
    "lasts TimeoutStopSec and then gets SIGKILL (rank 0's collectives then fail). KillMode=mixed: SIGTERM",
    "to the main process only, never to the schedulers directly (their crash path).",
)


@dataclass(frozen=True)
class Member:
    """One unit of a deployment: a replica (index), the router, or this host's rank."""

    role: str  # replica | router | rank
    index: int  # replica index or node rank; 0 for the router
    unit: RenderedUnit
    launch: Launch

    @property
    def label(self) -> str:
        return ROUTER if self.role == ROUTER else f"{self.role} {self.index}"


def front_member(members: list[Member]) -> Member | None:
    """The member clients reach, which the verify timer checks: the router, the one unit, rank 0; None on a rank >= 1
    (it serves no API)."""
    last = members[-1]
    if last.role == ROUTER or last.role == "single" or (last.role == "rank" and last.index == 0):
        return last
    return None


def replica_unit(base: str, index: int) -> str:
    return f"{base.removesuffix('.service')}-r{index}.service"


def router_unit(base: str) -> str:
    return f"{base.removesuffix('.service')}-{ROUTER}.service"


def is_replicated(profile: Profile) -> bool:
    """Whether the profile is a routed deployment (replicas behind the router) rather than one unit."""
    return routed(profile)


def router_wait_argv(profile: Profile, router: Launch, ctx: UnitContext) -> list[str]:
    argv = [
        ctx.kimi_serve,
        "wait-router",
        "--host",
        router.endpoint,
        "--min",
        "1",
        "--wait",
        str(profile.startup.timeout),
    ]
    return argv + (["--api-key-file", router.api_key_file] if router.api_key_file else [])


def joined_argv(profile: Profile, launch: Launch, ctx: UnitContext) -> list[str]:
    n = profile.nodes
    leader = f"[{n.leader_host}]" if ":" in (n.leader_host or "") else str(n.leader_host)
    return [
        ctx.kimi_serve,
        "wait-joined",
        "--leader",
        f"{leader}:{n.leader_port}",
        "--host",
        launch.host,
        "--port",
        str(launch.port),
        "--wait",
        str(profile.startup.timeout),
    ]


def render_members(profile: Profile, launch: Launch, ctx: UnitContext, base: str) -> list[Member]:
    """Every unit this host runs for ``profile``, in start order (replicas, then the router); ``launch`` is the
    validated launch, ``base`` the deployment's unit name (NAME.service). One member (the rank) for multi-node."""
    if not is_replicated(profile):
        return [_rank_member(profile, launch, ctx, base)]
    if profile.nodes.count > 1:
        raise KimiServeError(
            "a replicated deployment whose replicas each span several nodes is not rendered as services here",
            where=profile.where("nodes.count"),
            hint="install each replica's nodes from their own profile (replicas: 1, nodes:) and "
            "front them with router.workers",
        )
    local = [r for r in replicas(profile) if r.local]
    members = [_replica_member(profile, launch, ctx, base, r, len(local)) for r in local]
    router = build_router_launch(profile, launch.argv[0], pythonpath=ctx.package_root)
    units = [m.unit.name for m in members]
    shape = UnitShape(
        role=ROUTER,
        what=f"router in front of {len(replicas(profile))} replicas",
        posts=(tuple(router_wait_argv(profile, router, ctx)), tuple(verify_argv(profile, router, ctx))),
        post_comment=(
            "The router counts as started once it reports a healthy worker AND the API contract holds through it."
        ),
        unit_lines=tuple(line for u in units for line in (f"Wants={u}", f"After={u}")),
        stop_comment=ROUTER_STOP,
        timeout_comment="Waiting for a healthy worker + the contract check through the router.",
        timeout_start_sec=2 * profile.startup.timeout + int(profile.verify.timeout) + START_SLACK_SEC,
    )
    unit = render_unit(profile, router, ctx, unit_name=router_unit(base), shape=shape)
    return [*members, Member(ROUTER, 0, unit, router)]


def _replica_member(profile: Profile, launch: Launch, ctx: UnitContext, base: str, rep: Replica, count: int) -> Member:
    own = build_launch(profile, launch.argv[0], port=rep.port)
    shape = UnitShape(
        role=f"replica:{rep.index}",
        what=f"replica {rep.index} of {count}",
        posts=(tuple(verify_argv(profile, own, ctx)),),
        post_comment=(
            "This replica counts as started only once the API contract holds on its own "
            "port (structured tool_calls and reasoning_content)."
        ),
    )
    return Member(
        "replica", rep.index, render_unit(profile, own, ctx, unit_name=replica_unit(base, rep.index), shape=shape), own
    )


def _rank_member(profile: Profile, launch: Launch, ctx: UnitContext, base: str) -> Member:
    n = profile.nodes
    if n.count <= 1:
        return Member("single", 0, render_unit(profile, launch, ctx, unit_name=base), launch)
    if n.rank == 0:
        shape = UnitShape(
            role="rank:0",
            what=f"node rank 0 of {n.count}, the leader",
            posts=(tuple(verify_argv(profile, launch, ctx)),),
            post_comment=(
                "Rank 0 serves the API: the unit counts as started only once every rank has "
                "joined and the contract holds."
            ),
            stop_comment=RANK_STOP,
        )
    else:
        shape = UnitShape(
            role=f"rank:{n.rank}",
            what=f"node rank {n.rank} of {n.count}",
            posts=(tuple(joined_argv(profile, launch, ctx)),),
            post_comment=(
                "A rank >= 1 serves no API (its /health is a dummy): it counts as started "
                "once it holds a connection to rank 0's store and its schedulers are ready."
            ),
            stop_comment=RANK_STOP,
            timeout_comment="Cold start (weights, joining rank 0) + the join check.",
        )
    return Member("rank", n.rank, render_unit(profile, launch, ctx, unit_name=base, shape=shape), launch)


def installed_members(root: Path, base: str) -> list[tuple[str, int, str]]:
    """(role, index, unit name) of the deployment units kimi-serve wrote under ``root`` for ``base``: the replicas in
    index order, then the router. Empty when ``base`` is not a replicated deployment here."""
    stem = base.removesuffix(".service")
    unit_dir = root / UNIT_DIR
    found: list[tuple[str, int, str]] = []
    if unit_dir.is_dir():
        for path in unit_dir.glob(f"{stem}-r*.service"):
            m = _REPLICA.match(path.name)
            if m and m["base"] == stem and _ours(path):
                found.append(("replica", int(m["index"]), path.name))
    found.sort(key=lambda x: x[1])
    router = unit_dir / router_unit(base)
    if _ours(router):
        found.append((ROUTER, 0, router.name))
    return found


def _ours(path: Path) -> bool:
    text = read_text(path) if path.is_file() else None
    return text is not None and parse_marker(text) is not None
