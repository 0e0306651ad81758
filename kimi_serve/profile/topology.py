"""The deployment's shape as data (no I/O), the one home of the replica addressing rule: with ``router.workers`` empty
the ``replicas`` run on this host at ``server.port + i``; else each ``HOST:PORT`` entry is one replica on its own host.
"""

from __future__ import annotations

from dataclasses import dataclass

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.net import host_port, is_loopback
from kimi_serve.profile.loader import Profile


@dataclass(frozen=True)
class Replica:
    index: int  # 0-based, the router's order
    host: str  # where clients (and the router) reach it
    port: int
    local: bool  # runs on this host (rendered from this profile with server.port + index)

    @property
    def endpoint(self) -> str:
        return host_port(self.host, self.port)

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"


def parse_worker(addr: str) -> tuple[str, int] | None:
    """``HOST:PORT`` or ``[V6]:PORT`` -> (host, port); None when malformed (rules name such a ``router.workers``
    entry)."""
    addr = addr.strip()
    if addr.startswith("http://"):
        addr = addr[len("http://") :]
    if addr.startswith("["):
        host, _, rest = addr[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = addr.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host, int(port)


def replicas(profile: Profile) -> list[Replica]:
    """Every replica of the deployment, in the router's order. One (this server) when ``replicas`` is 1."""
    if not profile.router.workers:
        return [Replica(i, profile.server.host, profile.server.port + i, True) for i in range(profile.replicas)]
    parsed = [(i, parse_worker(addr)) for i, addr in enumerate(profile.router.workers)]
    # a malformed entry is left out: kimi_serve.check.topology_rules names the key
    return [Replica(i, hp[0], hp[1], False) for i, hp in parsed if hp is not None]


def routed(profile: Profile) -> bool:
    """Whether the deployment has a router in front (more than one replica)."""
    return bool(profile.replicas > 1)


def front_sets(profile: Profile, host: str | None, port: int | None) -> tuple[str, ...]:
    """``up --host/--port`` as the ``--set`` overrides they stand for: where clients reach the deployment. One server:
    ``server.host``/``server.port``; a routed deployment: the router's (``router.host``/``router.port``), its front
    door; its replicas keep ``server.*`` (``--set server.port=...`` moves them). ``host`` is written as a YAML string
    (``null`` or ``1e3`` stay a host name)."""
    section = "router" if routed(profile) else "server"
    given = {item.partition("=")[0].strip() for item in profile.overrides}
    for option, value in (("--host", host), ("--port", port)):
        key = f"{section}.{option[2:]}"
        if value is not None and key in given:
            raise KimiServeError(
                f"{option} and --set {key}=... both set {key}",
                where=option,
                hint=f"pass one of them ({option} is --set {key})",
                exit_code=ExitCode.USAGE,
            )
    sets = []
    if host is not None:
        sets.append(f'{section}.host="{host}"' if '"' not in host and "\\" not in host else f"{section}.host={host}")
    if port is not None:
        sets.append(f"{section}.port={port}")
    return tuple(sets)


def admin_key_required(p: Profile) -> bool:
    """Whether the key file must hold a distinct admin-api-key: ``server.admin_key``, ``auto`` meaning a keyed profile
    on a non-loopback host or behind a router (check's host layer and doctor read the file; check's rules see only
    the profile)."""
    if p.server.admin_key == "auto":
        return bool(p.server.api_key_file) and (routed(p) or not is_loopback(p.server.host))
    return bool(p.server.admin_key == "required")
