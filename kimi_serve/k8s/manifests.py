"""The manifests of a profile, one topology each (docs/kubernetes.md):

- one replica on one node: a Deployment (``Recreate``: a second pod would need a second box's GPUs) and a Service
  ``NAME-api``;
- replicas behind the router: a StatefulSet under a headless Service ``NAME`` (pod J is ``NAME-J.NAME.NS``, the
  router's ``--worker-urls``), the router's Deployment and its Service ``NAME-router`` (the clients' endpoint);
- multi-node (``nodes.count > 1``): a LeaderWorkerSet of ``replicas`` groups of ``nodes.count`` pods, leader = rank
  0 (the only one with the API, ``NAME-api`` selects the leaders), every rank's argv from LWS's variables; with
  replicas, the router in front as above (it sends to each group's leader);
- the contract check of the verify timer as a CronJob ``NAME-verify`` writing the same textfile metrics, and the
  alert rules as a PrometheusRule ``NAME-contract`` (unless monitor.enabled is false).

The API key Secret (``NAME-api-key``) and the weights' claim (``NAME-models``) are referenced, never rendered.
"""

from __future__ import annotations

import math
import posixpath
from typing import Any

from kimi_serve.core.errors import ExitCode
from kimi_serve.k8s import pod
from kimi_serve.k8s.view import K8sPlan, escaped, plan
from kimi_serve.profile.loader import Profile
from kimi_serve.service.monitor_units import STUCK_MARGIN, metrics_file

Obj = dict[str, Any]
LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
METRICS_DIR = "/var/lib/kimi-serve/metrics"  # where the verify Job sees the node's textfile directory
# The verify Job's wrapper: runs its arguments and exits with their status, except 75 (verify --metrics-file: an
# earlier run still holds the file, nothing checked), a success as in the verify unit (SuccessExitStatus=75): a Job
# that exits non-zero counts as failed. The argv travels as "$@", never through the shell's parser.
SKIP_AS_SUCCESS = f'rc=0; "$@" || rc=$?; if [ "$rc" -eq {int(ExitCode.LOCKED)} ]; then rc=0; fi; exit "$rc"'


def _labels(p: K8sPlan, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "kimi-serve",
        "app.kubernetes.io/instance": p.name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": "kimi-serve",
    }


def _selector(p: K8sPlan, component: str) -> dict[str, str]:
    return {"app.kubernetes.io/instance": p.name, "app.kubernetes.io/component": component}


def _meta(p: K8sPlan, name: str, component: str) -> Obj:
    return {
        "name": name,
        "namespace": p.namespace,
        "labels": _labels(p, component),
        "annotations": {"kimi-serve/profile": p.profile.name},
    }


_API = {"Service": "v1", "Deployment": "apps/v1", "StatefulSet": "apps/v1", "LeaderWorkerSet": LWS_API}
_API |= {"CronJob": "batch/v1", "PrometheusRule": "monitoring.coreos.com/v1"}


def _obj(p: K8sPlan, kind: str, name: str, component: str, spec: Obj) -> Obj:
    return {"apiVersion": _API[kind], "kind": kind, "metadata": _meta(p, name, component), "spec": spec}


def _service(p: K8sPlan, name: str, component: str, selector: dict[str, str], port: int, headless: bool) -> Obj:
    ports = [{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}]
    kind = {"clusterIP": "None"} if headless else {"type": "ClusterIP"}
    return _obj(p, "Service", name, component, {"selector": selector, "ports": ports, **kind})


def _template(p: K8sPlan, labels: dict[str, str], spec: Obj) -> Obj:
    return {"metadata": {"labels": labels}, "spec": spec}


def servers(p: K8sPlan) -> list[Obj]:
    """The server workload and the Services that reach it."""
    prof, port, labels = p.profile, p.profile.server.port, _labels(p, "server")
    if p.multinode:
        group = {
            "size": int(prof.nodes.count),
            "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": _template(p, labels, pod.server_pod(p, serves_api=True)),
            "workerTemplate": _template(p, labels, pod.server_pod(p, serves_api=False)),
        }
        spec = {"replicas": int(prof.replicas), "startupPolicy": "LeaderCreated", "leaderWorkerTemplate": group}
        lws = _obj(p, "LeaderWorkerSet", p.name, "server", spec)
        leaders = {LWS_NAME: p.name, LWS_WORKER_INDEX: "0"}
        return [lws] if p.router else [lws, _service(p, f"{p.name}-api", "server", leaders, port, False)]
    selector = _selector(p, "server")
    tail = {"selector": {"matchLabels": selector}, "template": _template(p, labels, pod.server_pod(p, serves_api=True))}
    if p.router is None:
        spec = {"replicas": 1, "strategy": {"type": "Recreate"}, **tail}
        api = _service(p, f"{p.name}-api", "server", selector, port, False)
        return [_obj(p, "Deployment", p.name, "server", spec), api]
    spec = {"replicas": int(prof.replicas), "serviceName": p.name, "podManagementPolicy": "Parallel", **tail}
    return [_obj(p, "StatefulSet", p.name, "server", spec), _service(p, p.name, "server", selector, port, True)]


def router(p: K8sPlan) -> list[Obj]:
    if p.router is None:
        return []
    selector = _selector(p, "router")
    template = _template(p, _labels(p, "router"), pod.router_pod(p))
    spec = {"replicas": 1, "selector": {"matchLabels": selector}, "template": template}
    svc = _service(p, f"{p.name}-router", "router", selector, p.router.port, False)
    return [_obj(p, "Deployment", f"{p.name}-router", "router", spec), svc]


def schedule(interval: int) -> str:
    """monitor.interval as a cron schedule (whole minutes, at least one)."""
    minutes = max(1, math.ceil(interval / 60))
    if minutes < 60:
        return "* * * * *" if minutes == 1 else f"*/{minutes} * * * *"
    return f"0 */{min(24, math.ceil(minutes / 60))} * * *"


def verify_job(p: K8sPlan) -> list[Obj]:
    """The verify timer as a CronJob: the same bounded check and textfile metrics, never two at once; a run skipped
    because an earlier one still writes the metrics file (exit 75) succeeds, as the unit's does."""
    m = p.profile.monitor
    if not m.enabled:
        return []
    if p.router is not None:
        endpoint, unit = f"{p.name}-router.{p.namespace}:{p.router.port}", f"{p.name}-router"
    else:
        endpoint, unit = f"{p.name}-api.{p.namespace}:{p.profile.server.port}", p.name
    host_file = metrics_file(p.profile, unit)
    job_file = f"{METRICS_DIR}/{posixpath.basename(host_file)}"
    # the Job's own pod: the key copy read where the init container wrote it, no profile path to collide with
    command = pod.verify_command(
        p, endpoint, timeout=m.timeout, suite=m.suite, max_tokens=m.max_tokens, key_file=pod.KEY_COPY
    )
    command += [escaped(a) for a in ("--metrics-file", job_file, "--profile", p.profile.name)]
    command = ["/bin/sh", "-c", SKIP_AS_SUCCESS, "kimi-serve-verify", *command]  # "kimi-serve-verify" is $0
    key_vols, init = pod.key_volumes(p)
    key_mount = {"name": "api-key", "mountPath": pod.KEY_DIR, "readOnly": True} if init else None
    container = {
        "name": "verify",
        "image": p.image,
        "command": command,
        "securityContext": pod.container_security(),
        "volumeMounts": [
            {"name": "metrics", "mountPath": METRICS_DIR},
            {"name": "tmp", "mountPath": "/tmp"},
            *([key_mount] if key_mount else []),
        ],
    }
    volumes = [
        {"name": "metrics", "hostPath": {"path": posixpath.dirname(host_file), "type": "Directory"}},
        {"name": "tmp", "emptyDir": {}},
        *key_vols,
    ]
    spec = pod.pod_spec({"restartPolicy": "Never", "securityContext": pod.pod_security()}, container, volumes, init)
    job = {
        "backoffLimit": 0,
        "activeDeadlineSeconds": math.ceil(m.timeout) + STUCK_MARGIN,
        "template": _template(p, _labels(p, "verify"), spec),
    }
    cron = {
        "schedule": schedule(int(m.interval)),
        "concurrencyPolicy": "Forbid",
        "startingDeadlineSeconds": int(m.interval),
        "successfulJobsHistoryLimit": 1,
        "failedJobsHistoryLimit": 3,
        "jobTemplate": {"spec": job},
    }
    return [_obj(p, "CronJob", f"{p.name}-verify", "verify", cron), alert_rules(p)]


def go_string(text: str) -> str:
    """``text`` as a Go interpreted string literal (PromQL's strings and text/template's share its escapes)."""
    out = []
    for c in text:
        if c in '"\\':
            out.append("\\" + c)
        elif c.isprintable() and not 0xD800 <= ord(c) <= 0xDFFF:
            out.append(c)
        elif ord(c) > 0xFFFF:
            out.append(f"\\U{ord(c):08x}")
        else:  # a lone surrogate has no UTF-8 form: Go would refuse its escape
            out.append(f"\\u{ord(c) if not 0xD800 <= ord(c) <= 0xDFFF else 0xFFFD:04x}")
    return '"' + "".join(out) + '"'


def template_text(text: str) -> str:
    """``text`` as a Go template (Prometheus' rule annotations and labels) writes it back verbatim: text with a brace
    becomes one action printing it as a string, so no ``{{`` of its own (nor a ``{`` beside the rule's own ``{{``)
    opens an action; text without one is left as it is."""
    return f"{{{{ {go_string(text)} }}}}" if "{" in text or "}" in text else text


def draft_rules(sel: str, fresh: str, prof: str) -> list[Obj]:
    """The speculative draft's rules (docs/monitoring.md): dead (verify's ``draft`` row fails: draft_dead) and below
    the profile's floor (``speculative.accept_floor``, exported beside the figure)."""
    length = f"kimi_serve_contract_draft_accept_length{sel}"
    draft = sel[:-1] + ',probe="draft"}'
    return [
        {
            "alert": "KimiDraftDead",
            "expr": f"kimi_serve_contract_probe_pass{draft} == 0 and on(instance, endpoint) {fresh}",
            "for": "10m",
            "labels": {"severity": "page"},
            "annotations": {
                "summary": f"speculative draft accepts nothing ({prof})",
                "description": "{{ $labels.endpoint }}: mean accept length 1.2 tokens/step or less "
                "(kimi_serve_contract_draft_accept_length): every step pays for the draft and the server is slower "
                "than without it. Check the draft path (a draft for another model or vocab, weights lost) or turn "
                "speculative decoding off.",
            },
        },
        {
            "alert": "KimiDraftBelowFloor",
            "expr": f"{length} < kimi_serve_contract_draft_accept_floor{sel} and on(instance, endpoint) {fresh}",
            "for": "30m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "speculative draft below its expected acceptance ({{ $value }} tokens/step)" + f" ({prof})"
            },
        },
    ]


def alert_rules(p: K8sPlan) -> Obj:
    """docs/monitoring.md's sample rules for this profile, counting only fresh metrics files: each Job may run on
    another node, whose textfile directory keeps the last file it wrote. The profile's name is a PromQL string in the
    expressions and template text in the annotations (:func:`template_text`), whatever it holds."""
    m, prof = p.profile.monitor, template_text(p.profile.name)
    sel = f"{{profile={go_string(p.profile.name)}}}"
    fresh = f"(time() - kimi_serve_contract_last_run_timestamp_seconds{sel} < {2 * int(m.interval) + 60})"
    stale_after = 3 * int(m.interval)
    rules = [
        {
            "alert": "KimiContractBroken",
            "expr": f"kimi_serve_contract_consecutive_failures{sel} >= 2 and on(instance, endpoint) {fresh}",
            "for": "5m",
            "labels": {"severity": "page"},
            "annotations": {
                "summary": f"Kimi API contract broken ({prof})",
                "description": "{{ $labels.endpoint }} failed {{ $value }} contract checks in a row: tool calls "
                f"or reasoning are not structured (or the server is down). kubectl -n {p.namespace} get pods,jobs",
            },
        },
        {
            "alert": "KimiContractCheckStale",
            "expr": f"time() - max by (profile, endpoint) (kimi_serve_contract_last_run_timestamp_seconds{sel}) "
            f"> {stale_after}",
            "for": "5m",
            "labels": {"severity": "warning"},
            "annotations": {"summary": f"kimi-serve contract checks stopped ({prof}): the CronJob {p.name}-verify"},
        },
        {
            "alert": "KimiContractProbeFailing",
            "expr": f"kimi_serve_contract_probe_pass{sel} == 0 and on(instance, endpoint) {fresh}",
            "for": "15m",
            "labels": {"severity": "warning"},
            "annotations": {"summary": "probe {{ $labels.probe }} ({{ $labels.mode }}) failing" + f" ({prof})"},
        },
        *(draft_rules(sel, fresh, prof) if p.profile.speculative.enabled else []),
    ]
    spec = {"groups": [{"name": f"kimi-serve-contract-{p.name}", "rules": rules}]}
    return _obj(p, "PrometheusRule", f"{p.name}-contract", "verify", spec)


def render_manifests(profile: Profile, *, namespace: str, image: str) -> list[Obj]:
    """Every object of ``profile``'s deployment, in apply order (one-line error, exit 2, for a profile that cannot
    work: the same rules as `render` and `check`)."""
    p = plan(profile, namespace=namespace, image=image)
    return [*servers(p), *router(p), *verify_job(p)]


def to_yaml(docs: list[Obj]) -> str:
    """The manifests as one multi-document YAML stream (``kubectl apply -f -``), keys in a stable order."""
    import yaml

    return "".join("---\n" + yaml.safe_dump(d, sort_keys=False, default_flow_style=False) for d in docs)
