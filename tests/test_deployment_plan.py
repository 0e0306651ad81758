"""One deployment, planned once from a loaded profile (kimi_serve/profile/deployment.py): a view of the profile (another
rank, the Kubernetes view) is the profile with ``--set`` overrides applied in memory, never the YAML read again."""

from __future__ import annotations

import shutil
from pathlib import Path

from kimi_serve.check.launch import plan_deployment
from kimi_serve.k8s.view import plan as k8s_plan
from kimi_serve.profile.loader import load_profile, with_sets

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def _copied(tmp_path: Path, *names: str) -> Path:
    for name in names:
        shutil.copy(CONFIGS / f"{name}.yaml", tmp_path / f"{name}.yaml")
    return tmp_path / f"{names[0]}.yaml"


def test_with_sets_is_the_profile_loaded_with_those_sets(tmp_path: Path) -> None:
    path = _copied(tmp_path, "sim-dp2", "sim", "prod")
    sets = ("server.port=31000", "env.NCCL_DEBUG=INFO", "router.workers=['a:1', 'b:2']")
    expected = load_profile(str(path), ("service.unit_name=x", *sets))
    profile = load_profile(str(path), ("service.unit_name=x",))
    for name in ("sim-dp2", "sim", "prod"):  # the files are gone: nothing is read again
        (tmp_path / f"{name}.yaml").unlink()
    got = with_sets(profile, *sets)
    assert got.data == expected.data
    assert got.lines == expected.lines
    assert got.overrides == expected.overrides
    assert got.where("server.port") == "--set: server.port"
    assert got.cli_args() == expected.cli_args()


def test_render_and_k8s_read_the_profile_once(tmp_path: Path) -> None:
    """`render --node-rank` and `render --format k8s` plan from the loaded profile: its file may be gone by then."""
    path = _copied(tmp_path, "sim-dp2", "sim", "prod", "prod-tp16")
    multinode = load_profile(str(tmp_path / "prod-tp16.yaml"))
    routed = load_profile(str(path))
    for name in ("sim-dp2", "sim", "prod", "prod-tp16"):
        (tmp_path / f"{name}.yaml").unlink()
    rank1 = plan_deployment(multinode, node_rank=1)
    assert [(m.role, m.index) for m in rank1.members] == [("rank", 1)]
    assert rank1.front is None  # a rank >= 1 serves no API
    k8s = k8s_plan(routed, namespace="kimi", image="registry.example/kimi-serve:t")
    assert k8s.router is not None and k8s.profile.server.host == "0.0.0.0"


def test_members_of_a_routed_profile(tmp_path: Path) -> None:
    deployment = plan_deployment(load_profile("sim-dp2"))
    assert [m.label for m in deployment.members] == ["replica 0", "replica 1", "router"]
    assert [m.unit_name("sglang-kimi-dp2.service") for m in deployment.members] == [
        "sglang-kimi-dp2-r0.service",
        "sglang-kimi-dp2-r1.service",
        "sglang-kimi-dp2-router.service",
    ]
    assert [deployment.launches[m].port for m in deployment.replicas] == [30010, 30011]
    assert deployment.front is deployment.router
