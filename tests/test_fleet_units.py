"""A deployment's units without a running systemd: the replica and router units of a replicated profile, the rank
units of a multi-node one (rendering, ordering, gating, stop settings; the real systemd-analyze verify of the units
side by side), and install-service / status / uninstall-service of the deployment under an injected --root (offline
`systemctl --root`). The same units under a real systemd: tests/systemd/test_fleet_systemd.py.
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from kimi_serve.profile.deployment import Deployment, deployment_of
from kimi_serve.profile.launch import Launch, build_launch
from kimi_serve.profile.loader import Profile, load_profile
from kimi_serve.service.marker import parse_marker
from kimi_serve.service.member_units import installed_members, render_members
from kimi_serve.service.systemctl import Systemd, run
from kimi_serve.service.unit import UnitContext, render_unit

pytestmark = pytest.mark.usefixtures("systemd_tools")


@pytest.fixture(autouse=True)
def _no_sglang_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KIMI_SERVE_SGLANG_PYTHON", raising=False)


def _ctx() -> UnitContext:
    return UnitContext.detect()  # the real kimi-serve executable: systemd-analyze checks it exists


def _plan(profile: Profile, launch: Launch, ctx: UnitContext) -> Deployment:
    """The deployment install-service plans around ``launch`` (its units run kimi-serve from ``ctx``'s package)."""
    return deployment_of(profile, launch, pythonpath=ctx.package_root)


def _launch(profile_name: str, *sets: str):
    import sys

    p = load_profile(profile_name, sets)
    return p, build_launch(p, sys.executable)


def _exec_lines(text: str, key: str) -> list[list[str]]:
    return [
        shlex.split(line.split("=", 1)[1].replace("$$", "$"))
        for line in text.splitlines()
        if line.startswith(f"{key}=")
    ]


def _analyze(texts: dict[str, str]) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in texts.items():
            Path(tmp, name).write_text(text)
        done = run(["systemd-analyze", "verify", *(str(Path(tmp, n)) for n in texts)], timeout=120)
    return done.err.strip()


def test_replicated_profile_renders_replicas_and_a_router_ordered_after_them() -> None:
    profile, launch = _launch("sim-dp2")
    units = render_members(_plan(profile, launch, _ctx()), _ctx(), "sglang-kimi-dp2.service")
    members = list(units)
    assert [(m.role, m.index, units[m].name) for m in members] == [
        ("replica", 0, "sglang-kimi-dp2-r0.service"),
        ("replica", 1, "sglang-kimi-dp2-r1.service"),
        ("router", 0, "sglang-kimi-dp2-router.service"),
    ]
    for m, port in zip(members[:2], (30010, 30011), strict=True):
        start = _exec_lines(units[m].text, "ExecStart")[0]
        assert start[start.index("--port") + 1] == str(port)
        (post,) = _exec_lines(units[m].text, "ExecStartPost")  # gated on the contract, on its own port
        assert post[1:4] == ["verify", "--host", f"127.0.0.1:{port}"]
        marker = parse_marker(units[m].text)
        assert marker and marker.role == f"replica:{m.index}" and marker.endpoint == f"127.0.0.1:{port}"
    router = units[members[2]].text
    start = _exec_lines(router, "ExecStart")[0]
    assert start[1:5] == ["-P", "-m", "kimi_serve.router.shim", "--"]
    assert start[start.index("--worker-urls") + 1 : start.index("--policy")] == [
        "http://127.0.0.1:30010",
        "http://127.0.0.1:30011",
    ]
    wait, verify = _exec_lines(router, "ExecStartPost")  # a healthy worker first, then the contract through it
    assert wait[1:] == ["wait-router", "--host", "127.0.0.1:30000", "--min", "1", "--wait", "300"]
    assert verify[1:4] == ["verify", "--host", "127.0.0.1:30000"]
    unit_section = router.split("[Service]")[0]
    for replica in ("sglang-kimi-dp2-r0.service", "sglang-kimi-dp2-r1.service"):
        assert f"Wants={replica}\n" in unit_section and f"After={replica}\n" in unit_section
    assert "BindsTo=" not in router and "Requires=" not in router and "PartOf=" not in router
    assert _analyze({u.name: u.text for u in units.values()}) == ""


def test_a_single_replica_profile_is_the_single_unit_unchanged() -> None:
    profile, launch = _launch("sim")
    (unit,) = render_members(_plan(profile, launch, _ctx()), _ctx(), "sglang-kimi.service").values()
    assert unit.text == render_unit(profile, launch, _ctx()).text
    assert "role=" not in unit.text.splitlines()[0]


def _two_nodes(rank: int) -> tuple[str, ...]:
    return (
        "nodes.count=2",
        f"nodes.rank={rank}",
        "nodes.leader_host=10.0.0.1",
        "nodes.leader_port=20000",
        "parallel.tp_size=16",
    )


def test_multi_node_rank_units() -> None:
    ctx = _ctx()
    (rank0,) = (
        u.text for u in render_members(_plan(*_launch("sim", *_two_nodes(0)), ctx), ctx, "sglang-kimi.service").values()
    )
    (rank1,) = (
        u.text for u in render_members(_plan(*_launch("sim", *_two_nodes(1)), ctx), ctx, "sglang-kimi.service").values()
    )
    start0, start1 = _exec_lines(rank0, "ExecStart")[0], _exec_lines(rank1, "ExecStart")[0]
    for argv, rank in ((start0, "0"), (start1, "1")):
        assert argv[argv.index("--node-rank") + 1] == rank and argv[argv.index("--nnodes") + 1] == "2"
        assert argv[argv.index("--dist-init-addr") + 1] == "10.0.0.1:20000"
    (post0,) = _exec_lines(rank0, "ExecStartPost")
    assert post0[1] == "verify"  # rank 0 serves the API: gated on the contract
    (post1,) = _exec_lines(rank1, "ExecStartPost")  # rank 1: joining rank 0, never its dummy /health
    assert post1[1:] == [
        "wait-joined",
        "--leader",
        "10.0.0.1:20000",
        "--host",
        "127.0.0.1",
        "--port",
        str(load_profile("sim").server.port),
        "--wait",
        "300",
    ]
    assert "verify" not in post1
    for text in (rank0, rank1):
        assert "KillMode=mixed\n" in text and "KillSignal=SIGTERM\n" in text and "Stop RANK 0 FIRST" in text
        assert f"TimeoutStopSec={load_profile('sim').service.stop_timeout}\n" in text
    assert parse_marker(rank1).role == "rank:1" and parse_marker(rank0).role == "rank:0"  # type: ignore[union-attr]
    assert _analyze({"a.service": rank0}) == "" and _analyze({"b.service": rank1}) == ""


def _tree(root: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = (
                os.readlink(p) if p.is_symlink() else (p.read_bytes() if p.is_file() else b"")
            )
    return out


def test_install_status_uninstall_of_a_deployment_under_a_root(
    cli: Callable[..., object], root: Path, write_profile: Callable[..., Path]
) -> None:
    profile = write_profile("extends: sim-dp2\nservice:\n  unit_name: fleet\n", name="fleet")
    units = root / "etc/systemd/system"
    before = _tree(root)
    dry = cli("install-service", "--profile", str(profile), "--root", str(root), "--dry-run", "--json")
    assert dry.code == 0, dry.err  # type: ignore[attr-defined]
    plan = json.loads(dry.out)  # type: ignore[attr-defined]
    assert [u["unit"] for u in plan["units"]] == ["fleet-r0.service", "fleet-r1.service", "fleet-router.service"]
    assert [(m["role"], m["index"]) for m in plan["deployment"]] == [("replica", 0), ("replica", 1), ("router", 0)]
    assert plan["unit"] == "fleet.service" and plan["unit_text"] == plan["units"][0]["unit_text"]
    assert all(a.startswith(("[replica 0] ", "[replica 1] ", "[router] ")) for a in plan["actions"]), plan["actions"]
    assert _tree(root) == before  # the dry run changed nothing
    # status --profile of a deployment not installed yet: every member unit it names, not one unit of its base name
    none = cli("status", "--profile", str(profile), "--root", str(root), "--json")
    assert none.code == 1  # type: ignore[attr-defined]
    doc = json.loads(none.out)  # type: ignore[attr-defined]
    assert doc["missing_units"] == ["fleet-r0.service", "fleet-r1.service", "fleet-router.service"], doc
    assert [f["code"] for f in doc["findings"]] == ["unit.not_installed"] and doc["router"] is None
    text = cli("status", "--profile", str(profile), "--root", str(root)).out  # type: ignore[attr-defined]
    assert "not installed: fleet-r0.service, fleet-r1.service, fleet-router.service" in text, text

    r = cli("install-service", "--profile", str(profile), "--root", str(root))
    assert r.code == 0, r.err  # type: ignore[attr-defined]
    for name in ("fleet-r0.service", "fleet-r1.service", "fleet-router.service"):
        assert (units / name).is_file()
        assert os.readlink(units / "multi-user.target.wants" / name) == f"/etc/systemd/system/{name}"
    assert not (units / "fleet.service").exists()  # no unit of the deployment's own name
    timer = (units / "fleet-router-verify.service").read_text()
    assert '"--host" "127.0.0.1:30000"' in timer  # the verify timer checks the contract through the router
    assert (units / "timers.target.wants/fleet-router-verify.timer").is_symlink()
    assert list(installed_members(root, "fleet.service").values()) == [
        "fleet-r0.service",
        "fleet-r1.service",
        "fleet-router.service",
    ]
    assert not list((root / "var/lib/kimi-serve/service").glob(".*.intent.json"))  # every journal removed

    st = cli("status", "--unit-name", "fleet", "--root", str(root), "--json")
    assert st.code == 1  # type: ignore[attr-defined]  # not the running system: nothing is known to serve
    data = json.loads(st.out)  # type: ignore[attr-defined]
    assert data["deployment"] == "fleet" and data["router"]["unit"] == "fleet-router.service"
    assert [x["unit"] for x in data["replicas"]] == ["fleet-r0.service", "fleet-r1.service"]
    assert data["router"]["endpoint"] == "127.0.0.1:30000" and data["serving"] is False
    assert data["missing_units"] == [] and data["findings"], (
        data
    )  # not serving says why (never findings: [] + ok: false)
    assert cli("status", "--profile", str(profile), "--root", str(root), "--json").code == 1  # type: ignore[attr-defined]

    gone = cli("uninstall-service", "--unit-name", "fleet", "--root", str(root))
    assert gone.code == 0, gone.err  # type: ignore[attr-defined]
    assert sorted(p.name for p in units.iterdir() if p.is_file()) == []
    wants = units / "multi-user.target.wants"
    assert not wants.exists() or not any(wants.iterdir())


def test_a_crash_mid_deployment_install_is_rolled_back_for_every_member(
    cli: Callable[..., object], root: Path, write_profile: Callable[..., Path]
) -> None:
    """A kimi-serve crash (exit 70: the journals stay, as after SIGKILL) once the first member's unit is written and
    enabled: every member's journal is on disk (all written before the first change); rolling them back restores
    the unit directory and the user database (the service account it created is removed: as root it is created for
    real; otherwise the root fixture pre-seeds it and it stays), and the next install works."""
    import subprocess
    import sys

    profile = write_profile("extends: sim-dp2\nservice:\n  unit_name: fleet\n", name="fleet")
    before = _tree(root)
    env = {**os.environ, "KIMI_SERVE_TEST_HOOK": "raise-at=service.write.enabled"}
    done = subprocess.run(
        [sys.executable, "-m", "kimi_serve", "install-service", "--profile", str(profile), "--root", str(root)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 70, done.stderr  # an unexpected failure mid-way: the journals stay
    journals = sorted(p.name for p in (root / "var/lib/kimi-serve/service").glob(".*.intent.json"))
    assert journals == [".fleet-r0.intent.json", ".fleet-r1.intent.json", ".fleet-router.intent.json"]
    from kimi_serve.service.fleet import recover_fleet

    messages = recover_fleet(Systemd(run, root), "fleet.service")
    assert len(messages) == 3
    after = _tree(root)
    assert {k: v for k, v in after.items() if k.startswith("etc/systemd")} == {
        k: v for k, v in before.items() if k.startswith("etc/systemd")
    }
    assert not (root / "etc/systemd/system/fleet-r0.service").exists()
    assert not list((root / "var/lib/kimi-serve/service").glob(".*.intent.json"))
    assert (after["etc/passwd"], after["etc/group"]) == (before["etc/passwd"], before["etc/group"])
    again = cli("install-service", "--profile", str(profile), "--root", str(root))
    assert again.code == 0, again.err  # type: ignore[attr-defined]


def test_fewer_replicas_removes_the_extra_units(
    cli: Callable[..., object], root: Path, write_profile: Callable[..., Path]
) -> None:
    three = write_profile("extends: sim-dp2\nreplicas: 3\nservice:\n  unit_name: fleet\n", name="fleet")
    assert cli("install-service", "--profile", str(three), "--root", str(root)).code == 0  # type: ignore[attr-defined]
    assert list(installed_members(root, "fleet.service").values())[-2:] == ["fleet-r2.service", "fleet-router.service"]
    two = write_profile("extends: sim-dp2\nservice:\n  unit_name: fleet\n", name="fleet")
    r = cli("install-service", "--profile", str(two), "--root", str(root))
    assert r.code == 0, r.err  # type: ignore[attr-defined]
    assert list(installed_members(root, "fleet.service").values()) == [
        "fleet-r0.service",
        "fleet-r1.service",
        "fleet-router.service",
    ]
    assert '"http://127.0.0.1:30012"' not in (root / "etc/systemd/system/fleet-router.service").read_text()


def test_install_service_renders_this_hosts_rank(cli: Callable[..., object], root: Path) -> None:
    sets = [
        "--set",
        "nodes.count=2",
        "--set",
        "nodes.leader_host=10.0.0.1",
        "--set",
        "parallel.tp_size=16",
        "--set",
        "allreduce.flashinfer_fusion_backend=null",
    ]
    r = cli(
        "install-service", "--profile", "sim", *sets, "--node-rank", "1", "--root", str(root), "--dry-run", "--json"
    )
    assert r.code == 0, r.err  # type: ignore[attr-defined]
    plan = json.loads(r.out)  # type: ignore[attr-defined]
    assert parse_marker(plan["unit_text"]).role == "rank:1"  # type: ignore[union-attr]
    assert '"wait-joined" "--leader" "10.0.0.1:20000"' in plan["unit_text"]
    assert not any("verify.timer" in a for a in plan["actions"])  # a rank >= 1 has no API for the timer to check
    r = cli(
        "install-service", "--profile", "sim", *sets, "--node-rank", "0", "--root", str(root), "--dry-run", "--json"
    )
    plan = json.loads(r.out)  # type: ignore[attr-defined]
    assert parse_marker(plan["unit_text"]).role == "rank:0" and '"verify" "--host"' in plan["unit_text"]  # type: ignore[union-attr]
    assert any("verify.timer" in a for a in plan["actions"])
