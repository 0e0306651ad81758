"""`render --format k8s`: a golden per shipped profile, every golden schema-valid (tests/k8s_schemas.py), the argv in
the pods is render's, the key only as a Secret reference, the contract as the readiness gate.

Regenerate the goldens with ``KIMI_SERVE_UPDATE_GOLDEN=1 .venv/bin/pytest -n 0 tests/test_k8s_render.py`` and review
the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_schemas import K8S_VERSION, LWS_API, LWS_SCHEMA, check_lws, validate

from kimi_serve.k8s.manifests import LWS_API as RENDERED_LWS_API
from kimi_serve.k8s.pod import KEY_COPY, KEY_DIR, SECRET_DIR
from kimi_serve.k8s.view import IMAGE_KIMI_SERVE, IMAGE_PYTHON, KEY_FILE, view_sets
from kimi_serve.profile.loader import load_profile

GOLDEN = Path(__file__).parent / "golden" / "k8s"
SHIPPED = ("prod", "prod-dp2", "prod-tp16", "sim-dp2", "sim", "baseline")
ARGS = ("--namespace", "kimi", "--image", "registry.example/kimi-serve:golden")


def _render(cli: Any, name: str, *sets: str) -> list[dict[str, Any]]:
    res = cli("render", "--profile", name, "--format", "k8s", *ARGS, *(a for s in sets for a in ("--set", s)))
    assert res.code == 0, res.err
    return [d for d in yaml.safe_load_all(res.out) if d]


def _containers(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(where, pod spec, container) for every container of every pod template, init containers included."""
    out = []
    for d in docs:
        spec = d["spec"]
        templates = {
            "Deployment": lambda s: [("", s["template"])],
            "StatefulSet": lambda s: [("", s["template"])],
            "CronJob": lambda s: [("", s["jobTemplate"]["spec"]["template"])],
            "LeaderWorkerSet": lambda s: [
                ("leader", s["leaderWorkerTemplate"]["leaderTemplate"]),
                ("worker", s["leaderWorkerTemplate"]["workerTemplate"]),
            ],
        }.get(d["kind"], lambda s: [])(spec)
        for role, t in templates:
            for c in t["spec"].get("initContainers", []) + t["spec"]["containers"]:
                out.append((f"{d['kind']}/{d['metadata']['name']}{'/' + role if role else ''}", t["spec"], c))
    return out


@pytest.mark.parametrize("name", SHIPPED)
def test_golden_manifests_per_shipped_profile(cli: Any, name: str) -> None:
    res = cli("render", "--profile", name, "--format", "k8s", *ARGS)
    assert res.code == 0, res.err
    golden = GOLDEN / f"{name}.yaml"
    if os.environ.get("KIMI_SERVE_UPDATE_GOLDEN"):
        golden.write_text(res.out)
    assert golden.is_file(), f"no golden manifests for {name}: run with KIMI_SERVE_UPDATE_GOLDEN=1 and review the diff"
    assert res.out == golden.read_text()


@pytest.mark.parametrize("name", SHIPPED)
def test_every_golden_is_schema_valid(name: str) -> None:
    docs = [d for d in yaml.safe_load_all((GOLDEN / f"{name}.yaml").read_text()) if d]
    against = {validate(d) for d in docs}
    assert f"Kubernetes {K8S_VERSION}" in against
    assert (f"LWS {LWS_API}" in against) == (name == "prod-tp16")


def test_the_validators_can_fail(cli: Any) -> None:
    (deployment, *_rest) = _render(cli, "prod")
    broken = json.loads(json.dumps(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}  # a typo the API server would drop
    with pytest.raises(AssertionError, match="readinesProbe"):
        validate(broken)
    broken = json.loads(json.dumps(deployment))
    broken["spec"]["replicas"] = "1"
    with pytest.raises(AssertionError):
        validate(broken)
    lws = _render(cli, "prod-tp16")[0]
    typo = json.loads(json.dumps(lws))
    typo["spec"]["leaderWorkerTemplate"]["sizee"] = 2
    with pytest.raises(AssertionError, match="sizee"):
        check_lws(typo)
    bad = json.loads(json.dumps(lws))
    bad["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "Sometimes"
    with pytest.raises(AssertionError, match="restartPolicy"):
        check_lws(bad)
    bad = json.loads(json.dumps(lws))
    bad["spec"]["startupPolicy"] = "LeaderStarted"
    with pytest.raises(AssertionError, match="startupPolicy"):
        check_lws(bad)
    wrong = json.loads(json.dumps(lws))
    wrong["spec"]["leaderWorkerTemplate"]["size"] = "2"  # a wrong type
    with pytest.raises(AssertionError, match="size"):
        check_lws(wrong)
    wrong = json.loads(json.dumps(lws))
    wrong["spec"]["replicas"] = 1.5
    with pytest.raises(AssertionError, match="replicas"):
        check_lws(wrong)
    for field in ("apiVersion", "kind"):
        other = json.loads(json.dumps(lws))
        other[field] = {"apiVersion": "leaderworkerset.x-k8s.io/v1alpha1", "kind": "LeaderWorkerSets"}[field]
        with pytest.raises(AssertionError, match=field):
            check_lws(other)
    missing = json.loads(json.dumps(lws))
    del missing["spec"]["leaderWorkerTemplate"]["size"]  # the API would default it to 1: a group of one node
    with pytest.raises(AssertionError, match="size"):
        check_lws(missing)
    extra = json.loads(json.dumps(lws))
    extra["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["labelz"] = {}
    with pytest.raises(AssertionError, match="labelz"):
        check_lws(extra)
    pod = json.loads(json.dumps(lws))
    pod["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["imagee"] = "x"
    with pytest.raises(AssertionError, match="imagee"):
        check_lws(pod)


def test_topologies(cli: Any) -> None:
    kinds = {
        n: [(d["kind"], d["metadata"]["name"]) for d in _render(cli, n)] for n in ("prod", "prod-dp2", "prod-tp16")
    }
    assert kinds["prod"][:2] == [("Deployment", "sglang-kimi"), ("Service", "sglang-kimi-api")]
    assert kinds["prod-dp2"][:4] == [
        ("StatefulSet", "sglang-kimi-dp2"),
        ("Service", "sglang-kimi-dp2"),
        ("Deployment", "sglang-kimi-dp2-router"),
        ("Service", "sglang-kimi-dp2-router"),
    ]
    assert kinds["prod-tp16"][:2] == [("LeaderWorkerSet", "sglang-kimi-tp16"), ("Service", "sglang-kimi-tp16-api")]
    dp2 = _render(cli, "prod-dp2")
    assert dp2[1]["spec"]["clusterIP"] == "None" and dp2[0]["spec"]["serviceName"] == "sglang-kimi-dp2"
    router = dp2[2]["spec"]["template"]["spec"]["containers"][0]["command"]
    urls = router[router.index("--worker-urls") + 1 : router.index("--policy")]
    assert urls == [f"http://sglang-kimi-dp2-{j}.sglang-kimi-dp2.kimi:30000" for j in (0, 1)]
    lws = _render(cli, "prod-tp16")
    spec = lws[0]["spec"]
    assert spec["replicas"] == 1 and spec["leaderWorkerTemplate"]["size"] == 2
    assert lws[1]["spec"]["selector"] == {
        "leaderworkerset.sigs.k8s.io/name": "sglang-kimi-tp16",
        "leaderworkerset.sigs.k8s.io/worker-index": "0",
    }
    # multi-node replicas behind the router: one LWS group per replica, the router sends to each group's leader
    docs = _render(cli, "prod-tp16", "replicas=2", "router.host=0.0.0.0", "router.port=31000")
    assert docs[0]["spec"]["replicas"] == 2 and [d["kind"] for d in docs][:3] == [
        "LeaderWorkerSet",
        "Deployment",
        "Service",
    ]
    router = docs[1]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "http://sglang-kimi-tp16-1.sglang-kimi-tp16.kimi:30000" in router


@pytest.mark.parametrize("name", ["prod", "prod-dp2", "sim-dp2", "prod-tp16"])
def test_the_pods_run_renders_validated_argv(cli: Any, name: str) -> None:
    profile = load_profile(name)
    sets = view_sets(profile, profile.service.unit_name, "kimi")
    res = cli("render", "--profile", name, "--json", *(a for s in sets for a in ("--set", s)))
    assert res.code == 0, res.err
    rendered = json.loads(res.out)
    launches = rendered.get("launches") or [{"role": "replica", **rendered}]
    server = next(c for w, _s, c in _containers(_render(cli, name)) if c["name"] == "server" and "worker" not in w)
    replica = next(part for part in launches if part["role"] == "replica")
    want = [profile.python or IMAGE_PYTHON, *replica["argv"][1:]]
    if profile.nodes.count > 1:  # the rank and the leader's address come from LWS in every pod
        want[want.index("--node-rank") + 1] = "$(LWS_WORKER_INDEX)"
        want[want.index("--dist-init-addr") + 1] = "$(LWS_LEADER_ADDRESS):20000"
    assert server["command"] == want
    if rendered.get("launches"):
        router = next(c for _w, _s, c in _containers(_render(cli, name)) if c["name"] == "router")
        (rl,) = [part for part in launches if part["role"] == "router"]
        assert router["command"] == [profile.python or IMAGE_PYTHON, *rl["argv"][1:]]


@pytest.mark.parametrize("name", ["prod", "prod-dp2", "prod-tp16", "sim-dp2"])
def test_the_key_is_only_a_secret_reference(cli: Any, name: str, tmp_path: Path) -> None:
    canary = "sk-canary-4f1d0c9e"
    key_file = tmp_path / "keys" / "secrets.yaml"
    key_file.parent.mkdir()
    key_file.write_text(f"api-key: {canary}\nadmin-api-key: {canary}-admin\n")
    key_file.chmod(0o600)
    res = cli("render", "--profile", name, "--format", "k8s", *ARGS, "--set", f"server.api_key_file={key_file}")
    assert res.code == 0 and canary not in res.out
    docs = _render(cli, name)
    assert "Secret" not in {d["kind"] for d in docs}
    key_path = load_profile(name).server.api_key_file or KEY_FILE
    for where, spec, c in _containers(docs):
        words = c.get("command", [])
        assert "--api-key" not in words and not any(w.startswith("--api-key=") for w in words), where
        assert not any("api-key" in e["name"].lower() for e in c.get("env", [])), where
        secrets = [v["secret"] for v in spec["volumes"] if "secret" in v]
        assert secrets == [
            {
                "secretName": f"{docs[0]['metadata']['name']}-api-key",
                "defaultMode": 0o440,
                "items": [{"key": "api-key.yaml", "path": "api-key.yaml"}],
            }
        ], where
        if c["name"] in ("server", "router") and "worker" not in where:
            assert key_path in words, where  # SGLang's --config FILE / the shim's --api-key-file FILE
        if c["name"] in ("server", "router"):  # the copy, one file of the key's volume, read-only at the key path
            (key_mount,) = [m for m in c["volumeMounts"] if m["name"] == "api-key"]
            assert key_mount == {"name": "api-key", "mountPath": key_path, "subPath": "api-key.yaml", "readOnly": True}
        if c["name"] == "api-key":  # copies the Secret's file into the key's volume, 0600 and the pod user's
            assert c["command"] == ["install", "-m", "0600", f"{SECRET_DIR}/api-key.yaml", KEY_COPY]
            assert {m["mountPath"] for m in c["volumeMounts"]} == {SECRET_DIR, KEY_DIR}
        if c["name"] == "verify":  # the Job's own pod reads the copy where the init container wrote it
            assert words[words.index("--api-key-file") + 1] == KEY_COPY


@pytest.mark.parametrize("name", SHIPPED)
def test_least_privilege_and_the_contract_gate(cli: Any, name: str) -> None:
    profile = load_profile(name)
    docs = _render(cli, name)
    for where, spec, c in _containers(docs):
        sc, psc = c["securityContext"], spec["securityContext"]
        assert sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"], where
        assert sc["capabilities"] == {"drop": ["ALL"]} and psc["runAsUser"] != 0, where
        assert spec["automountServiceAccountToken"] is False, where
        assert not {"hostNetwork", "hostPID", "hostIPC"} & set(spec), where
        kinds = {k for v in spec["volumes"] for k in v if k != "name"}
        allowed = {"emptyDir", "secret", "persistentVolumeClaim"} | (
            {"hostPath"} if where.startswith("CronJob") else set()
        )
        assert kinds <= allowed, (where, kinds)  # Pod Security "restricted" volumes (the Job: node_exporter's dir)
        mounted = {m["mountPath"] for m in c.get("volumeMounts", [])}
        assert "/tmp" in mounted or c["name"] == "api-key", where
        if c["name"] != "server":
            continue
        env = {e["name"]: e["value"] for e in c["env"]}
        for var in ("XDG_CACHE_HOME", "TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE", "CUDA_CACHE_PATH", "HF_HOME"):
            assert any(env[var] == m or env[var].startswith(m + "/") for m in mounted), (where, var)
        (shm,) = [v for v in spec["volumes"] if v["name"] == "dshm"]
        assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": profile.kubernetes.shm_size}
        assert "/dev/shm" in mounted
        gpus = c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
        assert gpus == (str(profile.gpus) if profile.engine == "sglang" else None), where
        startup = c["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] >= profile.startup.timeout, where
        assert spec["terminationGracePeriodSeconds"] == profile.service.stop_timeout
        if "worker" in where:  # rank >= 1: no API, no contract; its port opens once it joined rank 0
            assert "readinessProbe" not in c and startup["tcpSocket"] == {"port": "http"}
            continue
        ready = c["readinessProbe"]
        command = ready["exec"]["command"]
        assert command[:2] == [IMAGE_KIMI_SERVE, "verify"] and command[command.index("--suite") + 1] == "quick"
        assert float(command[command.index("--timeout") + 1]) < ready["timeoutSeconds"] <= 300, where
        assert command[command.index("--host") + 1] == f"127.0.0.1:{profile.server.port}"
    cron = [d for d in docs if d["kind"] == "CronJob"]
    assert len(cron) == 1 and cron[0]["spec"]["concurrencyPolicy"] == "Forbid"
    verify = cron[0]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--metrics-file" in verify and verify[verify.index("--suite") + 1] == profile.monitor.suite
    rules = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert [r["alert"] for r in rules[0]["spec"]["groups"][0]["rules"]] == [
        "KimiContractBroken",
        "KimiContractCheckStale",
        "KimiContractProbeFailing",
        *(["KimiDraftDead", "KimiDraftBelowFloor"] if profile.speculative.enabled else []),
    ]


def test_the_verify_job_counts_a_skipped_run_as_success(cli: Any) -> None:
    """verify --metrics-file exits 75 when an earlier run still writes the file: the unit's SuccessExitStatus=75, and
    the Job's shell wrapper maps it to 0 (a Job exiting non-zero is failed); every other status passes through, and
    the argv reaches kimi-serve verbatim."""
    import subprocess
    import sys

    (cron,) = [d for d in _render(cli, "prod") if d["kind"] == "CronJob"]
    command = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["/bin/sh", "-c"] and command[4:6] == [IMAGE_KIMI_SERVE, "verify"]
    wrapper = command[:4]
    for rc, want in ((0, 0), (1, 1), (3, 3), (70, 70), (75, 0)):
        run = subprocess.run([*wrapper, sys.executable, "-c", f"raise SystemExit({rc})"], check=False)
        assert run.returncode == want, (rc, run.returncode)
    words = ["a b", "$(LWS_X)", "*", "'", '"; exit 9']
    echo = "import sys; print(repr(sys.argv[1:]))"
    run = subprocess.run([*wrapper, sys.executable, "-c", echo, *words], capture_output=True, text=True, check=False)
    assert run.returncode == 0 and run.stdout.strip() == repr(words)


def test_monitor_disabled_renders_no_cronjob(cli: Any) -> None:
    kinds = {d["kind"] for d in _render(cli, "prod", "monitor.enabled=false")}
    assert kinds == {"Deployment", "Service"}


def test_node_selector_and_tolerations(cli: Any) -> None:
    docs = _render(
        cli,
        "prod",
        'kubernetes.node_selector=["nvidia.com/gpu.product=RTX-PRO-6000"]',
        'kubernetes.tolerations=["nvidia.com/gpu:NoSchedule", "dedicated=kimi:NoExecute"]',
        "kubernetes.shm_size=32Gi",
    )
    spec = docs[0]["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "RTX-PRO-6000"}
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Equal", "effect": "NoExecute", "value": "kimi"},
    ]
    assert validate(docs[0])
    assert [v for v in spec["volumes"] if v["name"] == "dshm"][0]["emptyDir"]["sizeLimit"] == "32Gi"


def test_json_envelope(cli: Any) -> None:
    res = cli("render", "--profile", "prod-tp16", "--format", "k8s", "--json", *ARGS)
    assert res.code == 0
    doc = json.loads(res.out)
    assert doc["kind"] == "kimi-serve-render" and doc["exit_code"] == 0 and doc["ok"]
    assert [m["kind"] for m in doc["manifests"]][:2] == ["LeaderWorkerSet", "Service"]


def test_the_lws_schema_is_ours_and_closed() -> None:
    """LWS_SCHEMA is a valid JSON Schema, describes the API version the renderer emits, and names every field it
    allows: each object in it is closed, so a field the renderer adds fails until the schema describes it."""
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(LWS_SCHEMA)
    assert RENDERED_LWS_API == LWS_API and LWS_SCHEMA["properties"]["apiVersion"] == {"const": LWS_API}

    def objects(schema: Any, path: str) -> list[tuple[str, dict[str, Any]]]:
        if not isinstance(schema, dict):
            return []
        here = [(path, schema)] if "properties" in schema else []
        return here + [o for k, v in schema.get("properties", {}).items() for o in objects(v, f"{path}.{k}")]

    found = objects(LWS_SCHEMA, "")
    assert {p for p, _ in found} >= {".spec", ".spec.leaderWorkerTemplate", ".spec.leaderWorkerTemplate.workerTemplate"}
    assert all(o["additionalProperties"] is False for _p, o in found), [p for p, o in found]
