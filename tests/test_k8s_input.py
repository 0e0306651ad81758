"""`render --format k8s` and the profile's own text: every `$` from a profile reaches the pod unchanged (Kubernetes
expands `$(VAR)` in command, args, env values and exec probes; `$$` is its escape), `kubernetes.shm_size` is a
Kubernetes quantity, and tolerations have label keys, label values and a known effect (docs/kubernetes.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_schemas import expand

from kimi_serve.k8s.view import IMAGE_PYTHON, view_sets
from kimi_serve.profile.loader import load_profile

ARGS = ("--namespace", "kimi", "--image", "registry.example/kimi-serve:t")
LWS = {"LWS_WORKER_INDEX": "3", "LWS_LEADER_ADDRESS": "leader.example"}


def _container_env(container: dict[str, Any]) -> dict[str, str]:
    env: dict[str, str] = dict(LWS)
    for item in container.get("env", []):  # each value may use the ones before it
        env[item["name"]] = expand(item["value"], env)
    return env


def _docs(cli: Any, name: str, *sets: str) -> list[dict[str, Any]]:
    res = cli("render", "--profile", name, "--format", "k8s", *ARGS, *(a for s in sets for a in ("--set", s)))
    assert res.code == 0, res.err
    return [d for d in yaml.safe_load_all(res.out) if d]


def _pod_specs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"]
    if doc["kind"] == "LeaderWorkerSet":
        lwt = spec["leaderWorkerTemplate"]
        return [lwt["leaderTemplate"]["spec"], lwt["workerTemplate"]["spec"]]
    if doc["kind"] == "CronJob":
        return [spec["jobTemplate"]["spec"]["template"]["spec"]]
    return [spec["template"]["spec"]] if "template" in spec else []


DOLLARS = (
    "model.served_name=kimi$(HOME)$$x$",
    "env.KIMI_NOTE=a$(PATH)$b$$",
    "server.api_key_file=/etc/kimi-serve/k$(HOME)/key.yaml",
)


@pytest.mark.parametrize("name", ["prod", "sim-dp2", "prod-tp16"])
def test_every_dollar_of_the_profile_reaches_the_pod_unchanged(cli: Any, name: str) -> None:
    profile = load_profile(name, DOLLARS)
    sets = [*DOLLARS, *view_sets(profile, profile.service.unit_name, "kimi")]
    res = cli("render", "--profile", name, "--json", *(a for s in sets for a in ("--set", s)))
    assert res.code == 0, res.err
    rendered = json.loads(res.out)
    launches = {part["role"]: part for part in rendered.get("launches") or [{"role": "replica", **rendered}]}
    want = [profile.python or IMAGE_PYTHON, *launches["replica"]["argv"][1:]]
    if profile.nodes.count > 1:
        want[want.index("--node-rank") + 1] = LWS["LWS_WORKER_INDEX"]
        want[want.index("--dist-init-addr") + 1] = f"{LWS['LWS_LEADER_ADDRESS']}:20000"
    assert "kimi$(HOME)$$x$" in want
    seen = set()
    for doc in _docs(cli, name, *DOLLARS):
        for spec in _pod_specs(doc):
            for c in spec.get("initContainers", []) + spec["containers"]:
                env = _container_env(c)
                command = [expand(a, env) for a in c["command"]]
                if c["name"] == "server":
                    assert command == want
                    assert env["KIMI_NOTE"] == "a$(PATH)$b$$"
                    seen.add("server")
                elif c["name"] == "router":
                    assert command == [profile.python or IMAGE_PYTHON, *launches["router"]["argv"][1:]]
                    seen.add("router")
                if "exec" in c.get("readinessProbe", {}):
                    probe = c["readinessProbe"]["exec"]["command"]
                    # the kubelet expands an exec probe's command with the container's static env
                    assert "/etc/kimi-serve/k$(HOME)/key.yaml" in [expand(a, env) for a in probe], probe
                    seen.add("probe")
                if c["name"] in ("server", "router"):  # the key's mount path is not expanded: the profile's text
                    paths = [m["mountPath"] for m in c["volumeMounts"] if m["name"] == "api-key"]
                    assert paths == ["/etc/kimi-serve/k$(HOME)/key.yaml"], paths
    assert {"server", "probe"} <= seen


def test_the_lws_references_still_expand(cli: Any) -> None:
    docs = _docs(cli, "prod-tp16")
    command = _pod_specs(docs[0])[0]["containers"][0]["command"]
    assert "$(LWS_WORKER_INDEX)" in command and "$(LWS_LEADER_ADDRESS):20000" in command


def _refused(cli: Any, key: str, *sets: str) -> str:
    res = cli("render", "--profile", "prod", "--format", "k8s", *ARGS, *(a for s in sets for a in ("--set", s)))
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert res.code == 2 and len(lines) == 1, (res.code, res.err)
    assert key in lines[0] and "fix:" in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("size", ["64Gi", "1.5Gi", "32G", "1e9", "129e6", "128974848", "+1Ki", ".5Gi", "7Ei", "2E"])
def test_shm_size_quantities(cli: Any, size: str) -> None:
    docs = _docs(cli, "prod", f"kubernetes.shm_size='{size}'")
    (shm,) = [v for v in _pod_specs(docs[0])[0]["volumes"] if v["name"] == "dshm"]
    assert str(shm["emptyDir"]["sizeLimit"]) == size


@pytest.mark.parametrize(
    "size", ["lots", "1e30", "-1Gi", "0Gi", "1m", "64 Gi", "64GiB", "1.5.5", "Gi", "1e", "8Ei", "9" * 30, "0x10"]
)
def test_shm_size_that_is_no_quantity(cli: Any, size: str) -> None:
    line = _refused(cli, "kubernetes.shm_size", f"kubernetes.shm_size='{size}'")
    assert "Kubernetes quantity" in line


@pytest.mark.parametrize(
    "entry",
    [
        "bad key!:NoSchedule",
        "k=bad value:NoSchedule",
        "k=v:Sometimes",
        "gpu",
        "-k:NoSchedule",
        "k" * 64 + ":NoSchedule",
        "a" * 254 + "/k:NoSchedule",
        "k=" + "v" * 64 + ":NoExecute",
        "k=v=w:NoSchedule",
        "Example.com/k:NoSchedule",
    ],
)
def test_tolerations_are_checked(cli: Any, entry: str) -> None:
    line = _refused(cli, "kubernetes.tolerations", f"kubernetes.tolerations={json.dumps([entry])}")
    assert "KEY[=VALUE]:EFFECT" in line or "label" in line


def test_valid_tolerations(cli: Any) -> None:
    entries = [
        "nvidia.com/gpu:NoSchedule",
        "k=v:NoExecute",
        "example.com/k=:PreferNoSchedule",
        "k" * 63 + ":NoSchedule",
    ]
    docs = _docs(cli, "prod", f"kubernetes.tolerations={json.dumps(entries)}")
    assert _pod_specs(docs[0])[0]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "k", "operator": "Equal", "effect": "NoExecute", "value": "v"},
        {"key": "example.com/k", "operator": "Equal", "effect": "PreferNoSchedule", "value": ""},
        {"key": "k" * 63, "operator": "Exists", "effect": "NoSchedule"},
    ]


def test_a_profile_named_with_quote_and_dollar(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / 'we"i$rd.yaml'
    path.write_text("extends: builtin:sim\n")
    docs = _docs(cli, str(path))
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert all('{profile="we\\"i$rd"}' in e for e in exprs), exprs
    cron = next(d for d in docs if d["kind"] == "CronJob")
    command = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--profile") + 1] == 'we"i$$rd'
