"""Host names as a deployment sees them."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1); a name or a routable address is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# A wildcard bind address is what a server listens on, not where a client connects: it means this machine, reached
# through the loopback address of the same family ("" is what an unset bind address reads as).
WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def connect_host(host: str) -> str:
    """Where a local client connects to a server bound to ``host``: a wildcard maps to loopback, else ``host``."""
    return WILDCARDS.get(host, host)


def host_port(host: str, port: int) -> str:
    """``HOST:PORT`` as a client or a flag names it: an IPv6 address in brackets (``[::1]:30000``)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def client_url(host: str, port: int) -> str:
    """``http://HOST:PORT`` for a local client of a server bound to ``host`` (``[V6]`` for an IPv6 address)."""
    return f"http://{host_port(connect_host(host), port)}"
