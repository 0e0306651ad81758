"""The access rules: who may reach the API (an API key, or loopback only) and the admin endpoints (a distinct
admin-api-key when the API is reachable beyond this host), and no key given on the command line."""

from __future__ import annotations

from collections.abc import Iterator

from kimi_serve.check.rule_kit import bad, ok
from kimi_serve.core.findings import SKIP, WARN, Finding
from kimi_serve.core.keyfile import keyfile_recipe
from kimi_serve.core.net import is_loopback
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile
from kimi_serve.profile.topology import admin_key_required as admin_key_required  # its home: profile/topology.py

SECRET_FLAGS = ("--api-key", "--admin-api-key")
_ADMIN_FIX = "set server.admin_key: required (or auto), then {recipe} (adds a random admin-api-key)"


def rule_auth(p: Profile, launch: Launch) -> Iterator[Finding]:
    secret_flags = [a.split("=")[0] for a in launch.server_args if a.split("=")[0] in SECRET_FLAGS]
    if secret_flags:
        yield bad(
            p,
            "extra_args",
            f"{secret_flags[0]} puts a secret on the command line (visible in ps and the unit)",
            "remove it and set server.api_key_file to a 0600 YAML file 'api-key: KEY'",
        )
    if is_loopback(p.server.host) or p.server.api_key_file:
        yield ok("server.api_key_file", "API reachable only locally or protected by an API key")
    else:
        yield unkeyed(p, "server.host", "binding", "the server")


def unkeyed(p: Profile, key: str, what: str, exposed: str) -> Finding:
    """``key`` binds beyond loopback without an API key: a warning when the profile allows it, else a failure."""
    host = p.router.host if key == "router.host" else p.server.host
    if p.allow_unauthenticated:
        said = f"{what} {host} without an API key (allowed by the profile)"
        return bad(p, "allow_unauthenticated", said, "set server.api_key_file", status=WARN)
    fix = f"set server.api_key_file, or allow_unauthenticated: true, or {key.removeprefix('server.')}: 127.0.0.1"
    return bad(p, key, f"{what} {host} without an API key exposes {exposed}", fix)


def rule_admin_key(p: Profile, _: Launch) -> Iterator[Finding]:
    """SGLang lets the clients' api-key into its ~43 ADMIN_OPTIONAL endpoints unless an admin-api-key is set; the
    router's worker management (/workers) is guarded by the admin key alone (kimi_serve/router/shim.py)."""
    from kimi_serve.profile.topology import routed

    if not p.server.api_key_file:
        yield ok("server.admin_key", "no API key: admin endpoints follow server.host's reach")
    elif p.server.admin_key == "none" and routed(p):
        yield bad(
            p,
            "server.admin_key",
            "a keyed router needs a distinct admin key: without one its worker management (/workers) would take "
            "the clients' key, and any client could swap the replicas for its own server",
            _ADMIN_FIX.format(recipe=keyfile_recipe(p.cli_args())),
        )
    elif p.server.admin_key == "none" and not is_loopback(p.server.host):
        yield bad(
            p,
            "server.admin_key",
            f"binding {p.server.host} with one key for clients and admin: every client "
            "can update weights, load LoRA tensors, pause or slow the server",
            _ADMIN_FIX.format(recipe=keyfile_recipe(p.cli_args())),
        )
    elif admin_key_required(p):
        # a to-do for the host layer, not a pass: the profile alone cannot show the key file (check/host.py reads it)
        yield Finding(
            "rules",
            "server.admin_key",
            SKIP,
            "the key file must hold a distinct admin-api-key: not read by the profile rules (the host layer of "
            "`check` without --offline, and doctor, read it)",
        )
    else:
        yield ok("server.admin_key", "loopback only: the clients' key may reach the admin endpoints")
