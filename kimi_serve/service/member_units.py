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

from pathlib import Path

from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.net import host_port
from kimi_serve.profile.deployment import Deployment
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile
from kimi_serve.profile.member import Member, Role, unit_member, unit_name
from kimi_serve.service.marker import parse_marker
from kimi_serve.service.state import UNIT_DIR, read_text
from kimi_serve.service.timeouts import START_SLACK_SEC
from kimi_serve.service.unit import RenderedUnit, UnitContext, UnitShape, render_unit, verify_argv

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
    return [
        ctx.kimi_serve,
        "wait-joined",
        "--leader",
        host_port(str(n.leader_host), n.leader_port),
        "--host",
        launch.host,
        "--port",
        str(launch.port),
        "--wait",
        str(profile.startup.timeout),
    ]


def render_members(deployment: Deployment, ctx: UnitContext, base: str) -> dict[Member, RenderedUnit]:
    """The unit of every member this host runs of ``deployment`` (planned around the validated launch), in start
    order (replicas, then the router); ``base`` is the deployment's unit name (NAME.service). One member (the rank)
    for multi-node."""
    profile = deployment.profile
    if deployment.routed and profile.nodes.count > 1:
        raise KimiServeError(
            "a replicated deployment whose replicas each span several nodes is not rendered as services here",
            where=profile.where("nodes.count"),
            hint="install each replica's nodes from their own profile (replicas: 1, nodes:) and "
            "front them with router.workers",
        )
    if deployment.router is None:
        (one, launch), *_ = deployment.launches.items()
        return {one: _rank_unit(profile, one, launch, ctx, base)}
    local = [m for m in deployment.replicas if m.local]
    members = {m: _replica_unit(profile, ctx, base, m, deployment.launches[m], len(local)) for m in local}
    router = deployment.launches[deployment.router]
    units = [u.name for u in members.values()]
    shape = UnitShape(
        role=deployment.router.marker,
        what=f"router in front of {len(deployment.replicas)} replicas",
        posts=(tuple(router_wait_argv(profile, router, ctx)), tuple(verify_argv(profile, router, ctx))),
        post_comment=(
            "The router counts as started once it reports a healthy worker AND the API contract holds through it."
        ),
        unit_lines=tuple(line for u in units for line in (f"Wants={u}", f"After={u}")),
        stop_comment=ROUTER_STOP,
        timeout_comment="Waiting for a healthy worker + the contract check through the router.",
        timeout_start_sec=2 * profile.startup.timeout + int(profile.verify.timeout) + START_SLACK_SEC,
    )
    name = deployment.router.unit_name(base)
    return {**members, deployment.router: render_unit(profile, router, ctx, unit_name=name, shape=shape)}


def _replica_unit(
    profile: Profile, ctx: UnitContext, base: str, member: Member, own: Launch, count: int
) -> RenderedUnit:
    shape = UnitShape(
        role=member.marker,
        what=f"{member.label} of {count}",
        posts=(tuple(verify_argv(profile, own, ctx)),),
        post_comment=(
            "This replica counts as started only once the API contract holds on its own "
            "port (structured tool_calls and reasoning_content)."
        ),
    )
    return render_unit(profile, own, ctx, unit_name=member.unit_name(base), shape=shape)


def _rank_unit(profile: Profile, member: Member, launch: Launch, ctx: UnitContext, base: str) -> RenderedUnit:
    n = profile.nodes
    if member.role is Role.SINGLE:
        return render_unit(profile, launch, ctx, unit_name=base)
    if n.rank == 0:
        shape = UnitShape(
            role=member.marker,
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
            role=member.marker,
            what=f"node rank {n.rank} of {n.count}",
            posts=(tuple(joined_argv(profile, launch, ctx)),),
            post_comment=(
                "A rank >= 1 serves no API (its /health is a dummy): it counts as started "
                "once it holds a connection to rank 0's store and its schedulers are ready."
            ),
            stop_comment=RANK_STOP,
            timeout_comment="Cold start (weights, joining rank 0) + the join check.",
        )
    return render_unit(profile, launch, ctx, unit_name=base, shape=shape)


def installed_members(root: Path, base: str) -> dict[Member, str]:
    """The deployment units kimi-serve wrote under ``root`` for ``base`` (each member, where its marker says it
    listens, -> its unit name), in start order: the replicas in index order, then the router. Empty when ``base`` is
    not a replicated deployment here."""
    stem = base.removesuffix(".service")
    unit_dir = root / UNIT_DIR
    found: dict[Member, str] = {}
    paths = sorted(unit_dir.glob(f"{stem}-r*.service")) if unit_dir.is_dir() else []
    for path in [*paths, unit_dir / unit_name(base, Role.ROUTER, 0)]:
        member = unit_member(base, path.name)
        text = read_text(path) if member and path.is_file() else None
        marker = parse_marker(text) if text is not None else None
        if member and marker is not None:
            found[Member(*member, marker.endpoint, True)] = path.name
    return dict(sorted(found.items(), key=lambda mu: mu[0].start_order))
