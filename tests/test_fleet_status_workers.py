"""`kimi-serve status` of a deployment compares the router's worker set (GET /workers, read with the admin key) with
its replicas: a worker that is no replica (added through the router's control plane) or a replica missing from the
rotation makes the deployment degraded (exit 1), and the text names it. The live router side of this is
tests/test_router_control_plane.py; here the verdict over a given worker list."""

from __future__ import annotations

from kimi_serve.core.errors import ExitCode
from kimi_serve.profile.member import Member, parse_role
from kimi_serve.router.client import Worker
from kimi_serve.service.fleet_status import FleetStatus
from kimi_serve.service.marker import Marker
from kimi_serve.service.status import Status

UP = {"ActiveState": "active", "SubState": "running"}


def _member(unit: str, endpoint: str, role: str) -> tuple[Member, Status]:
    marker = Marker("1", "sim-dp2", "none", endpoint, "0" * 64, True, role=role)
    parsed = parse_role(role)
    assert parsed is not None
    return Member(*parsed, endpoint, True), Status(
        unit, f"/etc/systemd/system/{unit}", True, marker, dict(UP), health="ready"
    )


def _fleet(workers: list[Worker]) -> FleetStatus:
    members = [_member(f"sglang-kimi-dp2-r{i}.service", f"127.0.0.1:{30010 + i}", f"replica:{i}") for i in (0, 1)]
    members.append(_member("sglang-kimi-dp2-router.service", "127.0.0.1:30000", "router"))
    return FleetStatus("sglang-kimi-dp2.service", dict(members), workers=workers)


REPLICAS = [Worker("http://127.0.0.1:30010", True), Worker("http://127.0.0.1:30011", True)]


def test_exactly_the_replicas_is_whole() -> None:
    st = _fleet(list(REPLICAS))
    assert st.exit_code == ExitCode.OK and st.unexpected == []
    assert st.to_json()["router"]["unexpected_workers"] == []


def test_an_unexpected_worker_is_degraded_and_named() -> None:
    st = _fleet([*REPLICAS, Worker("http://203.0.113.7:8000", True)])
    assert st.serving and st.exit_code == ExitCode.FAILED
    assert st.unexpected == ["http://203.0.113.7:8000"]
    assert st.to_json()["router"]["unexpected_workers"] == ["http://203.0.113.7:8000"]
    router_row = dict(st.rows())["router"]
    assert "UNEXPECTED workers (no replica of this deployment): http://203.0.113.7:8000" in router_row
    assert "(degraded" in dict(st.rows())["deployment"]


def test_a_removed_replica_is_degraded_and_named() -> None:
    st = _fleet([REPLICAS[0]])
    assert st.exit_code == ExitCode.FAILED and st.unexpected == []
    rows = st.rows()
    replica1 = next(text for name, text in rows if name == "replica 1")
    assert "NOT in the router's rotation" in replica1
