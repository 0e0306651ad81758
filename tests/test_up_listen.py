"""`up --host/--port`, what SGLang and vLLM users type: the ``--set`` overrides of the front door (profile/topology.py
``front_sets``): ``server.host``/``server.port`` of one server, the router's of a replicated profile (the replicas
keep ``server.port + i``); the deployment planned from them is the one ``--set`` plans; both ways at once is one line,
exit 2."""

from __future__ import annotations

import pytest

from kimi_serve.check.launch import plan_deployment
from kimi_serve.core.errors import ExitCode
from kimi_serve.profile.loader import load_profile, with_sets
from kimi_serve.profile.topology import front_sets


def _endpoints(profile_sets: tuple[str, ...], ref: str, host: str | None, port: int | None) -> list[tuple[str, str]]:
    p = load_profile(ref, profile_sets)
    deployment = plan_deployment(with_sets(p, *front_sets(p, host, port)))
    return [(m.label, m.endpoint) for m in deployment.members]


def test_one_server_is_server_host_and_port_as_set_gives_them() -> None:
    listened = _endpoints((), "sim", "127.0.0.2", 31555)
    assert listened == [("single 0", "127.0.0.2:31555")]
    same = plan_deployment(load_profile("sim", ("server.host=127.0.0.2", "server.port=31555")))
    assert listened == [(m.label, m.endpoint) for m in same.members]
    p = load_profile("sim")
    assert (
        plan_deployment(with_sets(p, *front_sets(p, "127.0.0.2", 31555))).launch.server_args == same.launch.server_args
    )


def test_a_replicated_profile_moves_its_router_and_keeps_its_replicas() -> None:
    assert _endpoints((), "sim-dp2", "127.0.0.3", 31555) == [
        ("replica 0", "127.0.0.1:30010"),
        ("replica 1", "127.0.0.1:30011"),
        ("router", "127.0.0.3:31555"),
    ]
    assert _endpoints(("server.port=30020",), "sim-dp2", None, 31555)[:2] == [
        ("replica 0", "127.0.0.1:30020"),
        ("replica 1", "127.0.0.1:30021"),
    ]


@pytest.mark.parametrize("host", ["null", "1e3", "::1"])
def test_a_host_is_a_string_whatever_yaml_makes_of_it(host: str) -> None:
    p = load_profile("sim")
    assert with_sets(p, *front_sets(p, host, None)).server.host == host


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--port", "31555", "--set", "server.port=31556"], "--port: --port and --set server.port=... both set"),
        (["--host", "127.0.0.2", "--set", "server.host=127.0.0.3"], "--host: --host and --set server.host=..."),
        (["--port", "0"], "--port"),
        (["--port", "65536"], "--port"),
    ],
)
def test_both_ways_at_once_or_a_bad_port_is_one_line_exit_2(cli, args: list[str], needle: str) -> None:  # type: ignore[no-untyped-def]
    res = cli("up", "--profile", "sim", "--dry-run", *args)
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert res.code == ExitCode.USAGE and len(lines) == 1 and needle in lines[0], res.err
