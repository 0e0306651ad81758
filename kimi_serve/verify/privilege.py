"""Least-privilege checks verify runs after the contract probes: the clients' key must not open SGLang's admin
endpoints (:mod:`kimi_serve.verify.admin`; only a warning when the API listens on loopback alone), and the server's
process tree must not listen beyond loopback except on the API port and the ports the caller expects
(:mod:`kimi_serve.verify.listeners`)."""

from __future__ import annotations

import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from kimi_serve.core.findings import FAIL, SKIP, WARN, Finding
from kimi_serve.verify.admin import CODE as ADMIN_CODE
from kimi_serve.verify.admin import check_admin
from kimi_serve.verify.listeners import Listener, check_listeners
from kimi_serve.verify.report import verdict
from kimi_serve.verify.target import Target


def is_local(host: str) -> bool:
    """Whether ``host`` is an address of this machine (so the server's processes are visible in /proc)."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    for family, _, _, _, addr in infos:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.bind((addr[0], 0))
            return True
        except OSError:
            continue
    return False


def privilege_checks(
    target: Target, api_key: str | None, deadline: float, expected_ports: Iterable[int] = ()
) -> tuple[list[Finding], list[Listener] | None]:
    """(findings, the tree's listeners or None when not checked)."""
    findings = [check_admin(target, api_key, deadline)]
    parts = urlsplit(target.base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if not is_local(parts.hostname or ""):
        remote = f"{parts.hostname} is not this machine; listeners not checked (run verify on the server host)"
        findings.append(verdict("listeners", SKIP, remote))
        return findings, None
    listeners, found = check_listeners(port, expected_ports)
    api = [x for x in listeners if x.port == port]
    if findings[0].status == FAIL and findings[0].code == ADMIN_CODE and api and all(x.loopback for x in api):
        # a server only this machine reaches: what the rules allow (server.admin_key: auto on loopback), so a warning
        f = findings[0]
        findings[0] = Finding(f.layer, f.code, WARN, f"{f.message} (the API listens on loopback only)", f.fix)
    return findings + found, listeners if found[0].status != SKIP else None
