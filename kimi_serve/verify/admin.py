"""Does the clients' key open SGLang's admin endpoints? One harmless request tells.

SGLang 0.5.23 marks ~43 endpoints ``AuthLevel.ADMIN_OPTIONAL`` (weight updates, LoRA loading from tensors, pause,
profiling, memory release, ...). Its auth middleware (``sglang/srt/utils/auth.py``) lets them take the ``api-key``
when no ``admin-api-key`` is configured, and refuses the ``api-key`` (401) once one is. The middleware decides before
the endpoint runs, so asking one of them is enough, and the one asked here does nothing even when admitted:
``GET /remote_instance_transfer_engine_info`` without ``?rank=`` answers 400 "Missing or invalid rank parameter"
without touching the engine or the network.

SGLang's router (sglang-router 0.3.2) has no such endpoint (404), but a worker-management API: ``GET /workers``
lists the workers, ``POST /workers`` adds one and ``DELETE /workers/ID`` removes one. Whoever it admits can send
every client's next prompt, bearer token included, to a server of their own. With ``--control-plane-api-keys`` (what
kimi-serve's router shim sets) it refuses the clients' key there (401); with ``--api-key`` alone it takes it. So on
a 404 verify asks ``GET /workers`` (read-only) with the clients' key: a worker list is a FAIL.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from kimi_serve.core.findings import FAIL, PASS, SKIP, WARN, Finding
from kimi_serve.core.http import TransportError, request
from kimi_serve.core.net import is_loopback
from kimi_serve.verify.target import Target

ADMIN_PROBE_PATH = "/remote_instance_transfer_engine_info"  # ADMIN_OPTIONAL, GET, read-only (see above)
REFUSED = (401, 403)
CODE = "admin_open_to_clients"
FIX = (
    "add a distinct 'admin-api-key: OTHER-KEY' to the server's key file (server.api_key_file; install-service "
    "creates one) and restart"
)


def _loopback(target: Target) -> bool:
    return is_loopback(urlsplit(target.base_url).hostname or "")


def check_admin(target: Target, api_key: str | None, deadline: float) -> Finding:
    """PASS when the admin endpoints refuse ``api_key`` (the clients' key; None: no key), FAIL
    (``admin_open_to_clients``) when they take it, SKIP when the server has no such endpoint or did not answer."""
    path = ADMIN_PROBE_PATH
    try:
        reply = request("GET", target.url(path), deadline=deadline, api_key=api_key)
    except TransportError as err:
        return Finding("verify", "admin_auth", SKIP, f"GET {path}: {err.detail}; admin auth not checked")
    if reply.status in REFUSED:
        who = "the clients' API key" if api_key else "requests without a key"
        return Finding(
            "verify", "admin_auth", PASS, f"SGLang's admin endpoints refuse {who} (GET {path}: HTTP {reply.status})"
        )
    if reply.status in (404, 405):
        router = check_router_control_plane(target, api_key, deadline)
        if router is not None:
            return router
        return Finding(
            "verify",
            "admin_auth",
            SKIP,
            f"GET {path}: HTTP {reply.status}: no SGLang admin endpoint here; admin auth not checked",
        )
    if api_key:
        return Finding(
            "verify",
            CODE,
            FAIL,
            f"SGLang's admin endpoints accept the clients' API key (GET {path}: "
            f"HTTP {reply.status}, not 401): any client can update weights, load LoRA tensors, pause or "
            "slow the server",
            FIX,
        )
    if _loopback(target):
        return Finding(
            "verify",
            "admin_auth",
            PASS,
            f"no API key: admin endpoints are open to local users only "
            f"(GET {path}: HTTP {reply.status} on a loopback address)",
        )
    return Finding(
        "verify",
        "admin_open",
        WARN,
        f"no API key: SGLang's admin endpoints are open to anyone who "
        f"reaches {target.base_url} (GET {path}: HTTP {reply.status})",
        "set server.api_key_file with api-key and admin-api-key",
    )


ROUTER_PROBE_PATH = "/workers"  # sglang-router's worker list: GET, read-only, guarded by its control plane
ROUTER_CODE = "router_control_plane_open"
ROUTER_FIX = (
    "start the router through kimi-serve's shim with a key file holding a distinct 'admin-api-key: OTHER-KEY' "
    "(server.api_key_file): it sets --control-plane-api-keys, so /workers takes only the admin key"
)


def check_router_control_plane(target: Target, api_key: str | None, deadline: float) -> Finding | None:
    """On a server without SGLang's admin endpoints: PASS when a router's ``GET /workers`` refuses ``api_key``,
    FAIL (``router_control_plane_open``) when it lists the workers; None when this is no router (nothing else
    answers ``/workers`` with a worker list or a refusal)."""
    path = ROUTER_PROBE_PATH
    try:
        reply = request("GET", target.url(path), deadline=deadline, api_key=api_key)
    except TransportError:
        return None
    if reply.status in REFUSED:
        who = "the clients' API key" if api_key else "requests without a key"
        return Finding(
            "verify",
            "admin_auth",
            PASS,
            f"the router's worker management refuses {who} (GET {path}: HTTP {reply.status})",
        )
    if reply.status != 200 or b'"workers"' not in reply.body:
        return None
    if api_key is None and _loopback(target):
        return Finding(
            "verify",
            "admin_auth",
            PASS,
            f"no API key: the router's worker management is open to local users only (GET {path}: HTTP 200 on a "
            "loopback address)",
        )
    who = "the clients' API key" if api_key else "anyone without a key"
    return Finding(
        "verify",
        ROUTER_CODE,
        FAIL,
        f"the router's worker management takes {who} (GET {path}: HTTP 200, not 401): any client can add a "
        "worker of its own (POST /workers) and remove the real ones (DELETE /workers/ID), and so receive every "
        "client's prompts and keys",
        ROUTER_FIX,
    )
