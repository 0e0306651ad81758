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
from kimi_serve.verify.report import verdict
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


def _who(api_key: str | None, nobody: str = "requests without a key") -> str:
    return "the clients' API key" if api_key else nobody


def check_admin(target: Target, api_key: str | None, deadline: float) -> Finding:
    """PASS when the admin endpoints refuse ``api_key`` (the clients' key; None: no key), FAIL
    (``admin_open_to_clients``) when they take it, SKIP when the server has no such endpoint or did not answer."""
    path = ADMIN_PROBE_PATH
    try:
        reply = request("GET", target.url(path), deadline=deadline, api_key=api_key)
    except TransportError as err:
        return verdict("admin_auth", SKIP, f"GET {path}: {err.detail}; admin auth not checked")
    got = f"GET {path}: HTTP {reply.status}"
    if reply.status in REFUSED:
        return verdict("admin_auth", PASS, f"SGLang's admin endpoints refuse {_who(api_key)} ({got})")
    if reply.status in (404, 405):
        router = check_router_control_plane(target, api_key, deadline)
        return router or verdict("admin_auth", SKIP, f"{got}: no SGLang admin endpoint here; admin auth not checked")
    if api_key:
        return verdict(
            CODE,
            FAIL,
            f"SGLang's admin endpoints accept the clients' API key ({got}, not 401): any client can update weights, "
            "load LoRA tensors, pause or slow the server",
            FIX,
        )
    if _loopback(target):
        local = f"({got} on a loopback address)"
        return verdict("admin_auth", PASS, f"no API key: admin endpoints are open to local users only {local}")
    return verdict(
        "admin_open",
        WARN,
        f"no API key: SGLang's admin endpoints are open to anyone who reaches {target.base_url} ({got})",
        "set server.api_key_file with api-key and admin-api-key",
    )


ROUTER_FIX = (
    "start the router through kimi-serve's shim with a key file holding a distinct 'admin-api-key: OTHER-KEY' "
    "(server.api_key_file): it sets --control-plane-api-keys, so /workers takes only the admin key"
)


def check_router_control_plane(target: Target, api_key: str | None, deadline: float) -> Finding | None:
    """On a server without SGLang's admin endpoints: PASS when a router's ``GET /workers`` (its worker list, guarded
    by its control plane) refuses ``api_key``, FAIL (``router_control_plane_open``) when it lists the workers; None
    when this is no router (nothing else answers ``/workers`` with a worker list or a refusal)."""
    try:
        reply = request("GET", target.url("/workers"), deadline=deadline, api_key=api_key)
    except TransportError:
        return None
    got = f"GET /workers: HTTP {reply.status}"
    if reply.status in REFUSED:
        return verdict("admin_auth", PASS, f"the router's worker management refuses {_who(api_key)} ({got})")
    if reply.status != 200 or b'"workers"' not in reply.body:
        return None
    if api_key is None and _loopback(target):
        return verdict(
            "admin_auth",
            PASS,
            f"no API key: the router's worker management is open to local users only ({got} on a loopback address)",
        )
    return verdict(
        "router_control_plane_open",
        FAIL,
        f"the router's worker management takes {_who(api_key, 'anyone without a key')} ({got}, not 401): any client "
        "can add a worker of its own (POST /workers) and remove the real ones (DELETE /workers/ID), and so receive "
        "every client's prompts and keys",
        ROUTER_FIX,
    )
