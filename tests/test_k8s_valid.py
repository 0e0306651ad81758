"""`render --format k8s` is valid for every profile `check` accepts: for each shipped profile and hostile `--set`
variants (working directories and key files at the pod's own paths, profile names and served names holding `{{`,
`}}`, `$(`, quotes and non-ASCII), either render succeeds and every object validates (tests/k8s_schemas.py: the
Kubernetes schemas, distinct mount paths per container, nothing inside a read-only mount, the rules' annotations as
Go templates, the PromQL strings) and the profile's text reaches the pod and the alert verbatim, or `check` rejects
the profile. What only a pod cannot hold (a volume over the interpreter, the key file at a directory the pod mounts,
a model directory at one) is refused with one line naming the key, exit 2 (docs/kubernetes.md "Mounts")."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_schemas import expand, go_template, go_unquote, pod_specs, validate

from kimi_serve.check.report import fast_validate
from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.findings import FAIL
from kimi_serve.profile.loader import load_profile

SHIPPED = ("prod", "prod-dp2", "prod-tp16", "sim-dp2", "sim", "baseline")
ARGS = ("--namespace", "kimi", "--image", "registry.example/kimi-serve:t")
LWS = {"LWS_WORKER_INDEX": "1", "LWS_LEADER_ADDRESS": "leader.example"}

# Each must render valid manifests wherever check accepts the profile (the issue's cases first).
HOSTILE_SETS: list[tuple[str, ...]] = [
    ("service.working_directory=/tmp",),
    ("service.working_directory=/var/cache/kimi-serve",),
    ("server.api_key_file=/var/lib/kimi-serve/server/key.yaml",),  # a key file in the working directory
    ("server.api_key_file=/tmp/key.yaml",),
    ("service.working_directory=/tmp", "server.api_key_file=/tmp/key.yaml"),
    ("service.working_directory=/srv/kimi", "server.api_key_file=/srv/kimi/key.yaml"),
    ("service.working_directory=/var/cache/kimi-serve", "server.api_key_file=/var/cache/kimi-serve/k.yaml"),
    ("service.working_directory=/tmp/wd", "server.api_key_file=/tmp/wd/keys/key.yaml"),
    ("service.working_directory=/var/cache", "server.api_key_file=/tmp/k/key.yaml"),  # the cache inside the workdir
    ("server.api_key_file=/key.yaml",),  # a file at the top: a file mount needs no directory of its own
    ("server.api_key_file=/run/kimi-serve/key/api-key.yaml",),  # the init container's own path, in the server
    ("server.api_key_file=/run/kimi-serve/secret/api-key.yaml",),
    ("server.api_key_file=/var/lib/prometheus/node-exporter/k.yaml",),  # the verify Job's hostPath
    ("server.api_key_file=/var/lib/kimi-serve/metrics/k.yaml",),  # its mount path (check: the state root)
    ("server.api_key_file=/etc/kimi-serve/$(HOME)/k{{.yaml",),
    ("model.served_name=kimi{{$(HOME)}}'\"😀",),
    ("model.path=/tmp/kimi",),
    ("model.path=/tmp/kimi", "service.working_directory=/tmp"),  # check: the working directory holds the model
    ("model.path=/var/cache/kimi-serve/models/kimi",),
    ("model.path=/dev/shm/kimi",),
    ("model.path=/models/kimi", "speculative.draft_model_path=/models/kimi/draft"),  # the draft inside the model
    ("model.path=/models/kimi", "speculative.draft_model_path=/models/kimi"),
    ("model.path=/srv/a/kimi", "speculative.draft_model_path=/data/b/draft"),  # no common directory but /
    ("model.path=/kimi",),
    ("service.working_directory=/srv/w", "model.path=/srv/w/../m"),  # not normalised: check refuses it
]

CHECK_REJECTS_ON_PROD = [s for s in HOSTILE_SETS if "/var/lib/kimi-serve/metrics" in s[0] or "/srv/w/../m" in s[-1]]
CHECK_REJECTS_ON_PROD.append(("model.path=/tmp/kimi", "service.working_directory=/tmp"))
RENDER_ON_PROD = [s for s in HOSTILE_SETS if s not in CHECK_REJECTS_ON_PROD]

NAMES = ["contract{{", "}}done", "a{{ .Labels }}b", "x{{{", "{", "$(HOME)", "a$$(PATH)b", "q\"u'o`te", "kimi-😀"]
NAMES += ["ünï-名前", "{{- x -}}", "back\\slash", '{{ "x" }}', "{{ $value }}", "end{"]

# What a pod cannot hold though a host can: (--set items, the key the one line names).
POD_REFUSED: list[tuple[tuple[str, ...], str]] = [
    (("server.api_key_file=/tmp",), "server.api_key_file"),  # the key file at the pod's /tmp
    (("server.api_key_file=/var/cache/kimi-serve",), "server.api_key_file"),
    (("service.working_directory=/srv/k/w", "server.api_key_file=/srv/k"), "service.working_directory"),
    (("service.working_directory=/srv/k", "server.api_key_file=/srv/k"), "server.api_key_file"),
    (("service.working_directory=/opt",), "service.working_directory"),  # over /opt/kimi-serve/venv
    (("service.working_directory=/opt/kimi-serve/venv/bin",), "service.working_directory"),
    (("python=/tmp/venv/bin/python",), "python"),  # the interpreter under the pod's /tmp
    (("server.api_key_file=/opt/kimi-serve/venv/bin/python",), "server.api_key_file"),  # a file over it
    (("server.api_key_file=/opt/kimi-serve/venv/bin/kimi-serve",), "server.api_key_file"),  # the probe's program
    (("python=/srv/w/venv/bin/python", "service.working_directory=/srv/w"), "service.working_directory"),
]
POD_REFUSED_SGLANG: list[tuple[tuple[str, ...], str]] = [
    (("model.path=/tmp",), "model.path"),
    (("model.path=/var/cache/kimi-serve",), "model.path"),
    (("model.path=/dev/shm",), "model.path"),
    (("model.path=/var/cache",), "model.path"),  # the pod's cache directory inside the read-only weights
    (("model.path=/opt",), "model.path"),  # over the interpreter
    (("speculative.draft_model_path=/tmp",), "speculative.draft_model_path"),
]


@pytest.fixture(autouse=True)
def _default_state_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """check judges paths against kimi-serve's state root: the tests' own is under /tmp, where it would refuse a
    working directory of /tmp. Render and check write nothing: a state root that does not exist stands for the
    default one."""
    monkeypatch.setenv("KIMI_SERVE_STATE_DIR", "/nonexistent/kimi-serve-k8s-test-state")


def _sets(sets: tuple[str, ...]) -> list[str]:
    return [a for s in sets for a in ("--set", s)]


def _check_rejects(ref: str, sets: tuple[str, ...]) -> bool:
    try:
        profile = load_profile(ref, sets)
    except KimiServeError:
        return True  # the loader is check's first step
    _, findings = fast_validate(profile)
    return any(f.status == FAIL for f in findings)


def _containers(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for d in docs for spec in pod_specs(d) for c in spec.get("initContainers", []) + spec["containers"]]


def _expanded(container: dict[str, Any]) -> list[str]:
    """The container's command as the kubelet runs it: $(VAR) expanded with LWS's and the container's env."""
    env = dict(LWS)
    for item in container.get("env", []):
        env[item["name"]] = expand(item["value"], env)
    return [expand(word, env) for word in container["command"]]


def _valid(docs: list[dict[str, Any]], name: str, sets: tuple[str, ...]) -> None:
    """Every object valid, and the profile's own text (its name, a served name, the key path) verbatim where it
    lands: the pods' argv after Kubernetes' expansion, the alert rules' PromQL and annotations."""
    assert {validate(d) for d in docs}
    served = next((s.split("=", 1)[1] for s in sets if s.startswith("model.served_name=")), None)
    key = next((s.split("=", 1)[1] for s in sets if s.startswith("server.api_key_file=")), None)
    for c in _containers(docs):
        words = _expanded(c)
        if c["name"] == "server" and served:
            assert words[words.index("--served-model-name") + 1] == served, words
        if c["name"] in ("server", "router") and key:
            assert key in words and key in [m["mountPath"] for m in c["volumeMounts"]], (c["name"], words)
        if c["name"] == "verify":
            assert words[words.index("--profile") + 1] == name, words
    for rule_doc in (d for d in docs if d["kind"] == "PrometheusRule"):
        for rule in rule_doc["spec"]["groups"][0]["rules"]:
            matchers = re.findall(r'\{profile=("(?:[^"\\]|\\.)*")\}', rule["expr"])
            assert matchers and {go_unquote(m) for m in matchers} == {name}, rule["expr"]
            labels = {"profile": name, "endpoint": "E", "probe": "P", "mode": "M"}
            summary = go_template(rule["annotations"]["summary"], labels)
            assert f"({name})" in summary, (rule["annotations"]["summary"], summary)


@pytest.mark.parametrize("sets", HOSTILE_SETS, ids=lambda s: " ".join(s))
@pytest.mark.parametrize("base", SHIPPED)
def test_hostile_sets_render_valid_manifests_or_check_rejects(cli: Any, base: str, sets: tuple[str, ...]) -> None:
    res = cli("render", "--profile", base, "--format", "k8s", *ARGS, *_sets(sets))
    if res.code == 0:
        _valid([d for d in yaml.safe_load_all(res.out) if d], base, sets)
        return
    assert sets not in RENDER_ON_PROD or base != "prod", res.err  # the property must not pass by refusals alone
    assert _check_rejects(base, sets), f"render refused what check accepts: {res.err}"
    assert res.code == 2 and len(res.err.strip().splitlines()) == 1 and "Traceback" not in res.err, res.err


def test_the_issues_cases_render() -> None:
    """The cases issue 44 names (a key file in the working directory or under /tmp, a working directory of /tmp or
    /var/cache/kimi-serve) render on prod; each wrote two volumes at one mountPath before."""
    from kimi_serve.k8s.manifests import render_manifests

    for sets in HOSTILE_SETS[:5]:
        docs = render_manifests(load_profile("prod", sets), namespace="kimi", image="r/k:1")
        _valid(docs, "prod", sets)
        (server,) = [c for c in _containers(docs[:1]) if c["name"] == "server"]
        paths = [m["mountPath"] for m in server["volumeMounts"]]
        assert len(paths) == len(set(paths)) and "/tmp" in paths, paths


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("base", ["prod", "prod-tp16", "sim-dp2"])  # a Deployment, an LWS, a StatefulSet + router
def test_hostile_profile_names(cli: Any, tmp_path: Path, base: str, name: str) -> None:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"extends: builtin:{base}\n")
    res = cli("render", "--profile", str(path), "--format", "k8s", *ARGS)
    if res.code == 0:
        _valid([d for d in yaml.safe_load_all(res.out) if d], name, ())
        return
    assert _check_rejects(str(path), ()), f"render refused what check accepts: {res.err}"
    assert res.code == 2 and len(res.err.strip().splitlines()) == 1, res.err


@pytest.mark.parametrize(("sets", "key"), POD_REFUSED + POD_REFUSED_SGLANG, ids=lambda v: str(v))
def test_what_a_pod_cannot_hold_is_one_line_naming_the_key(cli: Any, sets: tuple[str, ...], key: str) -> None:
    assert not _check_rejects("prod", sets)  # a host can run it: only the pod cannot
    res = cli("render", "--profile", "prod", "--format", "k8s", *ARGS, *_sets(sets))
    lines = res.err.strip().splitlines()
    assert res.code == 2 and res.out == "" and len(lines) == 1, (res.code, res.err)
    assert f": {key}: " in lines[0] and "(fix: set " in lines[0] and "Traceback" not in lines[0], lines[0]


def test_the_mount_checks_fail_on_what_the_api_server_refuses(cli: Any) -> None:
    """check_mounts catches two volumes at one path (the old render of a /tmp working directory), and a mount inside
    another volume's read-only mount; go_template catches the old raw `contract{{` annotation."""
    import json

    docs = [d for d in yaml.safe_load_all(cli("render", "--profile", "prod", "--format", "k8s", *ARGS).out) if d]
    twice = json.loads(json.dumps(docs[0]))
    spec = twice["spec"]["template"]["spec"]
    spec["containers"][0]["volumeMounts"].append({"name": "workdir", "mountPath": "/tmp"})
    with pytest.raises(AssertionError, match="two volumes at one mountPath"):
        validate(twice)
    nested = json.loads(json.dumps(docs[0]))
    mounts = nested["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    mounts.append({"name": "workdir", "mountPath": "/models/Kimi-K2.5/work"})
    with pytest.raises(AssertionError, match="inside the read-only mount"):
        validate(nested)
    for text in ("Kimi API contract broken (contract{{)", 'x {{ "open }}', "{{ $nope }}", "{{/* c */ }}"):
        with pytest.raises(AssertionError):
            go_template(text)
