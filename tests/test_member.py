"""The member model (kimi_serve/profile/member.py): the role's marker form and its parse back (markers written by
earlier versions on installed hosts included), the unit name and its inverse, the start and stop order, labels and
tags; and that the planner's members and the rendered units speak it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kimi_serve.profile.deployment import deployment_of
from kimi_serve.profile.launch import build_launch
from kimi_serve.profile.loader import load_profile
from kimi_serve.profile.member import (
    Role,
    label,
    parse_role,
    start_order,
    stop_order,
    unit_member,
    unit_name,
)
from kimi_serve.service.marker import body_hash, parse_marker
from kimi_serve.service.member_units import installed_members, render_members
from kimi_serve.service.unit import UnitContext

# role= fields exactly as earlier versions wrote them into installed units (service/member_units.py before the member
# model): f"replica:{i}", "router", "rank:0", f"rank:{n.rank}", and no role field at all on a single unit.
OLD_MARKERS = {
    "replica:0": (Role.REPLICA, 0),
    "replica:1": (Role.REPLICA, 1),
    "replica:12": (Role.REPLICA, 12),
    "router": (Role.ROUTER, 0),
    "rank:0": (Role.RANK, 0),
    "rank:3": (Role.RANK, 3),
    "": (Role.SINGLE, 0),
}


@pytest.mark.parametrize(("text", "member"), OLD_MARKERS.items())
def test_markers_written_by_earlier_versions_parse(text: str, member: tuple[Role, int]) -> None:
    assert parse_role(text) == member
    assert member[0].marker(member[1]) == text  # and the model writes them back the same


def test_a_marker_line_of_an_earlier_version_parses_to_its_member() -> None:
    body = "[Unit]\nDescription=x\n"
    line = (
        "# kimi-serve unit: version=0.9.0 profile=sim patch_set=none endpoint=127.0.0.1:30001 role=replica:1 "
        f"sha256={body_hash(body)}"
    )
    marker = parse_marker(f"{line}\n{body}")
    assert marker is not None and marker.body_matches and parse_role(marker.role) == (Role.REPLICA, 1)


@pytest.mark.parametrize("text", ["replica", "replica:", "replica:x", "rank:-1", "worker:1", "router:0", "single"])
def test_an_unknown_role_field_is_none_not_a_guess(text: str) -> None:
    assert parse_role(text) is None


@pytest.mark.parametrize(
    ("role", "index", "unit"),
    [
        (Role.REPLICA, 0, "kimi-r0.service"),
        (Role.REPLICA, 7, "kimi-r7.service"),
        (Role.ROUTER, 0, "kimi-router.service"),
        (Role.SINGLE, 0, "kimi.service"),
        (Role.RANK, 2, "kimi.service"),
    ],
)
def test_unit_name_and_its_inverse(role: Role, index: int, unit: str) -> None:
    assert unit_name("kimi.service", role, index) == unit
    back = unit_member("kimi.service", unit)
    # the base itself is the one server or this host's rank, which the name alone cannot tell apart: no member
    assert back == ((role, index) if role in (Role.REPLICA, Role.ROUTER) else None)
    assert unit_member("kimi", unit.removesuffix(".service")) == back  # with or without .service


@pytest.mark.parametrize(
    "name", ["kimi", "kimi-r", "kimi-rx", "kimi-r1-r2", "other-r1", "kimi-routers", "kimi-r-1", "kimix-r1", "kimi-R1"]
)
def test_names_that_are_not_members(name: str) -> None:
    assert unit_member("kimi.service", name) is None


def test_start_and_stop_order() -> None:
    members = [(Role.ROUTER, 0), (Role.REPLICA, 10), (Role.REPLICA, 2), (Role.REPLICA, 0)]
    start = [(Role.REPLICA, 0), (Role.REPLICA, 2), (Role.REPLICA, 10), (Role.ROUTER, 0)]
    assert sorted(members, key=lambda m: start_order(*m)) == start
    assert sorted(members, key=lambda m: stop_order(*m)) == start[::-1]


def test_labels() -> None:
    assert [label(r, i) for r, i in [(Role.ROUTER, 0), (Role.REPLICA, 1), (Role.RANK, 0), (Role.SINGLE, 0)]] == [
        "router",
        "replica 1",
        "rank 0",
        "single 0",
    ]


def test_the_planned_members_and_their_units_speak_the_model() -> None:
    p = load_profile("sim", ["replicas=2"])
    launch = build_launch(p, sys.executable)
    d = deployment_of(p, launch)
    assert [(m.role, m.index, m.tag) for m in d.members] == [
        (Role.REPLICA, 0, "replica0"),
        (Role.REPLICA, 1, "replica1"),
        (Role.ROUTER, 0, "router"),
    ]
    assert [m.start_order for m in d.members] == sorted(m.start_order for m in d.members)
    assert d.members[0].to_json()["role"] == "replica" and type(d.members[0].to_json()["role"]) is str
    ctx = UnitContext.detect()
    units = render_members(deployment_of(p, launch, pythonpath=ctx.package_root), ctx, "kimi.service")
    assert [(m.role, m.index) for m in units] == [(m.role, m.index) for m in d.members]  # keyed, in start order
    for m, unit in units.items():
        marker = parse_marker(unit.text)
        assert marker is not None and parse_role(marker.role) == (m.role, m.index)
        assert unit_member("kimi.service", unit.name) == (m.role, m.index)


def test_verify_targets_name_the_router_only_when_there_is_one() -> None:
    from kimi_serve.profile.deployment import client_urls

    (one,) = client_urls(load_profile("sim"))
    assert one.role is Role.SINGLE  # no stand-in router at index 0
    urls = client_urls(load_profile("sim", ["replicas=2"]))
    assert [m.label for m in urls] == ["router", "replica 0", "replica 1"]  # the router first
    assert list(urls.values()) == ["http://127.0.0.1:30000", "http://127.0.0.1:30000", "http://127.0.0.1:30001"]


def test_a_running_up_names_its_members_from_its_record_whatever_the_profile_says_now() -> None:
    """`verify --profile P` of a running `up -p P --set replicas=2`: the record's router and replicas (the profile
    itself is one server); an odd index is kept by position, never raised on; a record of one server is one member."""
    from kimi_serve.core.runs import Run
    from kimi_serve.profile.deployment import run_members, running_urls

    record = {
        "profile": "sim",
        "started": "t",
        "endpoint": "0.0.0.0:30000",
        "router": {"endpoint": "0.0.0.0:30000"},
        "replicas": [{"index": 0, "endpoint": "127.0.0.1:30010"}, {"index": "x", "endpoint": "127.0.0.1:30011"}],
    }
    urls, run = running_urls(load_profile("sim"), [Run(Path("r.json"), record, True)])
    assert run is not None and [m.label for m in urls] == ["router", "replica 0", "replica 1"]
    assert list(urls.values()) == ["http://127.0.0.1:30000", "http://127.0.0.1:30010", "http://127.0.0.1:30011"]
    (one,) = run_members(Run(Path("r.json"), {"endpoint": "127.0.0.1:30000"}, True))
    assert (one.role, one.url) == (Role.SINGLE, "http://127.0.0.1:30000")
    urls, run = running_urls(load_profile("sim"), [Run(Path("r.json"), record, False)])  # stale: the profile's own
    assert run is None and [m.role for m in urls] == [Role.SINGLE]


def test_installed_units_are_members_read_from_their_markers(tmp_path: Path) -> None:
    """`status` and the rolling restart know a deployment's members from the units kimi-serve wrote (each marker's
    role and endpoint), in start order; a unit of another name, or one without a marker, is none of them."""
    p = load_profile("sim-dp2")
    ctx = UnitContext.detect()
    units = render_members(
        deployment_of(p, build_launch(p, sys.executable), pythonpath=ctx.package_root), ctx, "kimi.service"
    )
    unit_dir = tmp_path / "etc/systemd/system"
    unit_dir.mkdir(parents=True)
    for unit in reversed(units.values()):
        (unit_dir / unit.name).write_text(unit.text)
    (unit_dir / "kimi-r7.service").write_text("[Service]\nExecStart=/bin/true\n")  # not written by kimi-serve
    assert installed_members(tmp_path, "kimi.service") == {m: u.name for m, u in units.items()}
