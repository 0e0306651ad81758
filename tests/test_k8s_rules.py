"""What `render --format k8s` refuses: check's own rules on the Kubernetes view (PP + EAGLE-3, a router without its
admin key, ports that clash), each the one line `render` and `check` print, and the inputs only Kubernetes has."""

from __future__ import annotations

from typing import Any

import pytest

from kimi_serve.check.report import fast_validate
from kimi_serve.core.findings import FAIL
from kimi_serve.profile.loader import load_profile

ARGS = ("--namespace", "kimi", "--image", "registry.example/kimi-serve:1")

REFUSED = [
    # (profile, --set items, the key check names)
    ("prod-tp16", ("parallel.tp_size=8", "parallel.pp_size=2"), "parallel.pp_size"),  # PP + EAGLE-3
    ("prod-dp2", ("server.admin_key=none",), "server.admin_key"),  # a keyed router's control plane needs its key
    ("prod-dp2", ("router.metrics_port=31000",), "router.metrics_port"),  # the router's two ports
    ("prod-tp16", ("nodes.leader_port=30000",), "nodes.leader_port"),  # rank 0's API and its rendezvous
    ("sim-dp2", ("router.metrics_port=30000",), "router.metrics_port"),
]


def _sets(sets: tuple[str, ...]) -> list[str]:
    return [a for s in sets for a in ("--set", s)]


@pytest.mark.parametrize(("name", "sets", "key"), REFUSED)
def test_refused_as_render_and_check_refuse(cli: Any, name: str, sets: tuple[str, ...], key: str) -> None:
    k8s = cli("render", "--profile", name, "--format", "k8s", *ARGS, *_sets(sets))
    assert k8s.code == 2 and k8s.out == ""
    assert len(k8s.err.strip().splitlines()) == 1 and f": {key}: " in k8s.err and "Traceback" not in k8s.err
    launch = cli("render", "--profile", name, *_sets(sets))  # the same profile as a host launch
    assert launch.code == 2 and f": {key}: " in launch.err
    # check's rules, the one home of each: the same finding
    profile = load_profile(name, sets)
    _, findings = fast_validate(profile)
    assert any(f.where.endswith(key) for f in findings if f.status == FAIL), [f.line() for f in findings]


def test_an_unkeyed_router_in_a_pod_gets_the_secret_or_is_refused(cli: Any) -> None:
    # sim-dp2 has no key file (loopback on a host); in a pod it listens on the pod network, so it gets the Secret's
    ok = cli("render", "--profile", "sim-dp2", "--format", "k8s", *ARGS)
    assert ok.code == 0 and "/etc/kimi-serve/k8s/api-key.yaml" in ok.out and "sglang-kimi-dp2-api-key" in ok.out
    # asked for no key and no allow_unauthenticated: nothing to expose it with
    bad = cli("render", "--profile", "prod-dp2", "--format", "k8s", *ARGS, "--set", "server.admin_key=none")
    assert bad.code == 2
    # allow_unauthenticated: the profile's own choice, as on a host (a warning there), and no Secret
    open_ = cli("render", "--profile", "sim-dp2", "--format", "k8s", *ARGS, "--set", "allow_unauthenticated=true")
    assert open_.code == 0 and "api-key" not in open_.out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--namespace", "Kimi_NS"), "--namespace 'Kimi_NS'"),
        (("--set", "service.unit_name=Sglang.Kimi"), "service.unit_name"),
        (("--set", "kubernetes.tolerations=[gpu]"), "kubernetes.tolerations entry 'gpu'"),
        (("--set", "kubernetes.tolerations=[gpu:Sometimes]"), "kubernetes.tolerations"),
        (("--set", "kubernetes.node_selector=[gpu]"), "kubernetes.node_selector entry 'gpu'"),
        (("--node-rank", "1"), "--node-rank"),
        (("--image", "has space:1"), "--image"),
        (("--format", "helm"), "--format 'helm'"),
    ],
)
def test_bad_input_is_one_line_exit_2(cli: Any, args: tuple[str, ...], needle: str) -> None:
    base = ["render", "--profile", "prod-tp16" if "--node-rank" in args else "prod"]
    fmt = [] if "--format" in args else ["--format", "k8s"]
    res = cli(*base, *fmt, "--image", "registry.example/kimi-serve:1", *args)
    assert res.code == 2 and res.out == "", res.err
    assert len(res.err.strip().splitlines()) == 1 and needle in res.err, res.err


def test_json_error_is_the_envelope(cli: Any) -> None:
    import json

    res = cli("--json", "render", "--profile", "prod-dp2", "--format", "k8s", *ARGS, "--set", "server.admin_key=none")
    assert res.code == 2
    doc = json.loads(res.out)
    assert doc["ok"] is False and doc["exit_code"] == 2 and doc["findings"]


@pytest.mark.parametrize(
    ("interval", "cron"),
    [(30, "* * * * *"), (60, "* * * * *"), (300, "*/5 * * * *"), (301, "*/6 * * * *"), (3600, "0 */1 * * *")],
)
def test_monitor_interval_as_a_cron_schedule(interval: int, cron: str) -> None:
    from kimi_serve.k8s.manifests import schedule

    assert schedule(interval) == cron
