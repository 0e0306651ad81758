"""Host names as a deployment sees them."""

from __future__ import annotations

import ipaddress
import re
import socket

_NUMERIC_V4 = re.compile(r"(0[xX][0-9a-fA-F]*|[0-9]+)(\.(0[xX][0-9a-fA-F]*|[0-9]+)){0,3}")


def ip_of(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address ``host`` spells, or None for a name: any IPv6 form (brackets and a ``%zone`` allowed; an
    IPv4-mapped one as its IPv4 address), dotted IPv4, and the numeric forms ``inet_aton`` (so ``getaddrinfo``, so a
    server's bind and a client's connect) reads as IPv4: ``0``, ``0x0``, ``0.0``, ``000.0.0.0``, ``127.1``."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0] if ":" in text else text)
    except ValueError:
        if not _NUMERIC_V4.fullmatch(text):  # inet_aton also takes trailing text after a space: only numbers here
            return None
        try:
            return ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:  # out of range (0x1ffffffff, 256.0.0.0)
            return None
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return mapped or ip


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address in any spelling (127.0.0.0/8, ``127.1``, ``::1``, ``::ffff:127.0.0.1``); a
    name or a routable address is not."""
    if host == "localhost":
        return True
    ip = ip_of(host)
    return ip is not None and ip.is_loopback


def is_unspecified(host: str) -> bool:
    """A wildcard bind address (every interface) in any spelling: ``""``, ``0.0.0.0``, ``0``, ``0x0``, ``0.0``,
    ``::``, ``::0``, ``0:0:0:0:0:0:0:0``, ``::ffff:0.0.0.0``, in brackets or not."""
    if not host.strip("[] "):
        return True
    ip = ip_of(host)
    return ip is not None and ip.is_unspecified


def connect_host(host: str) -> str:
    """Where a local client connects to a server bound to ``host``: a wildcard bind address (:func:`is_unspecified`,
    any spelling) is what a server listens on, not where a client connects; it means this machine, reached through
    the loopback address of its family ("" is what an unset bind address reads as). Any other ``host`` is kept."""
    if not is_unspecified(host):
        return host
    ip = ip_of(host)
    return "::1" if isinstance(ip, ipaddress.IPv6Address) else "127.0.0.1"


def host_port(host: str, port: int) -> str:
    """``HOST:PORT`` as a client or a flag names it: an IPv6 address in brackets (``[::1]:30000``)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def client_url(host: str, port: int) -> str:
    """``http://HOST:PORT`` for a local client of a server bound to ``host`` (``[V6]`` for an IPv6 address)."""
    return f"http://{host_port(connect_host(host), port)}"


def endpoint_url(endpoint: str) -> str:
    """``http://HOST:PORT`` for a ``HOST:PORT`` endpoint as `up`'s run records name it (``[V6]:PORT`` too; a wildcard
    host reached on loopback, as :func:`client_url`); a malformed one is kept as it is, never raised on."""
    host, _, port = endpoint.rpartition(":")
    return client_url(host.strip("[]"), int(port)) if port.isdigit() and host else f"http://{endpoint}"
