"""The pods: the unit's least privilege carried into a securityContext, the writable volumes a read-only root needs
(the JIT caches the unit points into its CacheDirectory, /tmp, the working directory, /dev/shm for NCCL), the key
file from the Secret, GPUs from the profile, and the probes that make the contract the readiness gate.

The key: the Secret's ``api-key.yaml`` is copied by an init container into a memory-backed volume at the key file's
directory with mode 0600, owned by the pod's user. A Secret volume alone cannot give that: its files are root's,
group-readable under ``fsGroup``, and kimi-serve's key-file reader refuses any file group or others can read. The
key's value is in neither the manifest nor an argv; the argv names the file, as on a host.
"""

from __future__ import annotations

import math
import posixpath
import re
from decimal import Decimal
from typing import Any

from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.inputs import short_repr
from kimi_serve.core.suites import QUICK
from kimi_serve.k8s.view import IMAGE_KIMI_SERVE, SECRET_KEY, K8sPlan, escaped
from kimi_serve.profile.launch import Launch
from kimi_serve.service.hardening import CACHE_ROOT, cache_environment

UID = 10001  # the pods' user and group (numeric: Kubernetes checks runAsNonRoot by uid)
STARTUP_PERIOD = 10  # seconds between startupProbe tries; the budget is the profile's startup.timeout
SECRET_DIR = "/run/kimi-serve/secret"  # where the init container reads the Secret
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_PREFIX_MAX = 253  # a label key's DNS-subdomain prefix
# Kubernetes' quantity: a signed decimal number, then a binary-SI or decimal-SI suffix or a decimal exponent.
_QUANTITY = re.compile(r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$")
_SCALE = {f"{p}i": Decimal(2) ** (10 * (i + 1)) for i, p in enumerate("KMGTPE")}
_SCALE |= {p: Decimal(10) ** (3 * (i + 1)) for i, p in enumerate("kMGTPE")} | {"m": Decimal("0.001")}
_INT64_MAX = 2**63 - 1

Obj = dict[str, Any]


def container_security() -> Obj:
    """The unit's NoNewPrivileges / empty CapabilityBoundingSet / ProtectSystem=strict / SystemCallFilter."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security() -> Obj:
    return {
        "runAsNonRoot": True,
        "runAsUser": UID,
        "runAsGroup": UID,
        "fsGroup": UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _env(values: dict[str, str]) -> list[Obj]:
    return [{"name": k, "value": escaped(v)} for k, v in sorted(values.items())]


def _label_key(key: str) -> bool:
    prefix, _, _ = key.rpartition("/")
    return bool(_LABEL_KEY.match(key)) and len(prefix) <= _PREFIX_MAX


def shm_size(plan: K8sPlan) -> str:
    """``kubernetes.shm_size``, checked against Kubernetes' quantity grammar: a positive size that fits int64."""
    value = plan.profile.kubernetes.shm_size
    match = _QUANTITY.match(value)
    suffix = (match.group(1) or "") if match else ""
    size = Decimal(value[: len(value) - len(suffix)] or "0") if match else Decimal(0)
    if match and suffix[1:].lstrip("+-").isdigit():  # a decimal exponent, e.g. 129e6
        exponent = int(suffix[1:])
        size = size.scaleb(exponent) if abs(exponent) <= 100 else Decimal(_INT64_MAX + 1)
    elif match:
        size *= _SCALE.get(suffix, Decimal(1))
    if not match or size < 1 or size > _INT64_MAX:
        raise KimiServeError(
            f"kubernetes.shm_size {short_repr(value)} is not a Kubernetes quantity from one byte to 8Ei",
            where=plan.profile.where("kubernetes.shm_size"),
            hint="write a size such as 64Gi or 32G (NUMBER then Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P or E)",
        )
    return value


def tolerations(plan: K8sPlan) -> list[Obj]:
    """``kubernetes.tolerations`` (``KEY[=VALUE]:EFFECT``) as Toleration objects: a KEY alone tolerates the taint
    whatever its value (``Exists``), ``KEY=VALUE`` only that value (``Equal``)."""
    out = []
    for item in plan.profile.kubernetes.tolerations:
        taint, _, effect = item.rpartition(":")
        key, eq, value = taint.partition("=")
        problem = (
            "is not KEY[=VALUE]:EFFECT"
            if not key or effect not in _EFFECTS
            else f"has the key {short_repr(key)}, which is not a label key"
            if not _label_key(key)
            else f"has the value {short_repr(value)}, which is not a label value"
            if not _LABEL_VALUE.match(value)
            else None
        )
        if problem:
            raise KimiServeError(
                f"kubernetes.tolerations entry {short_repr(item)} {problem}",
                where=plan.profile.where("kubernetes.tolerations"),
                hint=f"write each as kubectl taint does (KEY: [PREFIX/]NAME of letters, digits and -_., at most 63; "
                f"VALUE the same or none), EFFECT one of {', '.join(_EFFECTS)}",
            )
        tol: Obj = {"key": key, "operator": "Equal" if eq else "Exists", "effect": effect}
        if eq:
            tol["value"] = value
        out.append(tol)
    return out


def node_selector(plan: K8sPlan) -> dict[str, str]:
    """``kubernetes.node_selector`` (``LABEL=VALUE``) as a nodeSelector."""
    out = {}
    for item in plan.profile.kubernetes.node_selector:
        key, eq, value = item.partition("=")
        if not eq or not _label_key(key) or not _LABEL_VALUE.match(value):
            raise KimiServeError(
                f"kubernetes.node_selector entry {short_repr(item)} is not LABEL=VALUE",
                where=plan.profile.where("kubernetes.node_selector"),
                hint="write each as a node label, e.g. nvidia.com/gpu.product=NVIDIA-RTX-PRO-6000",
            )
        out[key] = value
    return out


def key_volumes(plan: K8sPlan) -> tuple[list[Obj], list[Obj], Obj | None]:
    """(volumes, init containers, the main container's mount) that put the Secret's key file at the profile's path;
    nothing for an unkeyed profile."""
    if not plan.key_file:
        return [], [], None
    directory = posixpath.dirname(plan.key_file)
    volumes = [
        {
            "name": "api-key-secret",
            "secret": {
                "secretName": plan.secret,
                "defaultMode": 0o440,
                "items": [{"key": SECRET_KEY, "path": SECRET_KEY}],
            },
        },
        {"name": "api-key", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
    ]
    init = {
        "name": "api-key",
        "image": plan.image,
        "command": ["install", "-m", "0600", f"{SECRET_DIR}/{SECRET_KEY}", escaped(plan.key_file)],
        "securityContext": container_security(),
        "volumeMounts": [
            {"name": "api-key-secret", "mountPath": SECRET_DIR, "readOnly": True},
            {"name": "api-key", "mountPath": directory},
        ],
    }
    return volumes, [init], {"name": "api-key", "mountPath": directory, "readOnly": True}


def _models(plan: K8sPlan) -> tuple[Obj, Obj] | None:
    """The weights: a read-only PersistentVolumeClaim ``NAME-models`` at the directory holding model.path (and the
    draft model). The simulator reads no weights."""
    p = plan.profile
    if p.engine != "sglang":
        return None
    paths = [p.model.path, *([p.speculative.draft_model_path] if p.speculative.enabled else [])]
    root = posixpath.commonpath([posixpath.dirname(x) for x in paths if x])
    if root == "/":
        raise KimiServeError(
            "model.path and speculative.draft_model_path share no directory below / for the models volume",
            where=p.where("model.path"),
            hint="keep the model and the draft model under one directory, e.g. /models/",
        )
    volume = {"name": "models", "persistentVolumeClaim": {"claimName": f"{plan.name}-models", "readOnly": True}}
    return volume, {"name": "models", "mountPath": root, "readOnly": True}


def server_env(plan: K8sPlan, launch: Launch) -> dict[str, str]:
    """The launch's environment plus, as in the unit, every JIT cache in the cache volume, unbuffered output, and
    the working directory as HOME."""
    env = cache_environment(dict(launch.env))
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("HOME", plan.profile.service.working_directory)
    return env  # written with every $ escaped (_env)


def verify_command(plan: K8sPlan, endpoint: str, *, timeout: float, suite: str, max_tokens: int) -> list[str]:
    """``kimi-serve verify`` of ``endpoint`` (HOST:PORT): bounded, no readiness wait, the pod's key file; escaped for
    Kubernetes, which expands ``$(VAR)`` in an exec probe's command as in a container's."""
    argv = [IMAGE_KIMI_SERVE, "verify", "--host", endpoint, "--timeout", f"{timeout:g}"]
    argv += ["--suite", suite, "--max-tokens", str(max_tokens)]
    return [escaped(a) for a in argv + (["--api-key-file", plan.key_file] if plan.key_file else [])]


def startup_probe(probe: Obj, timeout: int) -> Obj:
    """Tolerates the cold start: up to ``timeout`` seconds (the profile's startup.timeout) before the kubelet
    restarts the container."""
    return {**probe, "periodSeconds": STARTUP_PERIOD, "failureThreshold": math.ceil(timeout / STARTUP_PERIOD)}


def readiness_contract(plan: K8sPlan) -> Obj:
    """The contract as the readiness gate: the quick suite, capped like the monitoring check, every
    monitor.interval seconds; two failures in a row take the pod out of its Services."""
    p, port = plan.profile, plan.profile.server.port
    timeout = p.verify.timeout
    command = verify_command(plan, f"127.0.0.1:{port}", timeout=timeout, suite=QUICK, max_tokens=p.monitor.max_tokens)
    if plan.multinode:  # rank 0 also listens for the other ranks' rendezvous: not a stray listener
        command += ["--expect-listener", str(p.nodes.leader_port)]
    return {
        "exec": {"command": command},
        "timeoutSeconds": math.ceil(timeout) + 10,
        "periodSeconds": max(int(p.monitor.interval), math.ceil(timeout) + 20),
        "failureThreshold": 2,
        "successThreshold": 1,
    }


def server_pod(plan: K8sPlan, *, serves_api: bool) -> Obj:
    """A server pod's spec. ``serves_api`` False: a rank >= 1 of a multi-node group (no API, no contract: its
    /health is SGLang's dummy, which opens only once its schedulers joined rank 0)."""
    p, launch = plan.profile, plan.server
    shm = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_size(plan)}}
    volumes: list[Obj] = [
        shm,
        {"name": "cache", "emptyDir": {}},
        {"name": "tmp", "emptyDir": {}},
        {"name": "workdir", "emptyDir": {}},
    ]
    mounts: list[Obj] = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "cache", "mountPath": CACHE_ROOT},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "workdir", "mountPath": p.service.working_directory},
    ]
    if (models := _models(plan)) is not None:
        volumes.append(models[0])
        mounts.append(models[1])
    key_vols, init, key_mount = key_volumes(plan)
    volumes += key_vols
    if key_mount:
        mounts.append(key_mount)
    port = p.server.port
    ports = [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    if plan.multinode and serves_api:
        ports.append({"name": "dist-init", "containerPort": p.nodes.leader_port, "protocol": "TCP"})
    container: Obj = {
        "name": "server",
        "image": plan.image,
        "command": list(launch.argv),
        "env": _env(server_env(plan, launch)),
        "ports": ports,
        "workingDir": p.service.working_directory,
        "securityContext": container_security(),
        "volumeMounts": mounts,
    }
    if p.engine == "sglang":
        container["resources"] = {"limits": {"nvidia.com/gpu": str(p.gpus)}}
    if serves_api:
        container["startupProbe"] = startup_probe({"httpGet": {"path": "/health", "port": "http"}}, p.startup.timeout)
        container["readinessProbe"] = readiness_contract(plan)
    else:
        container["startupProbe"] = startup_probe({"tcpSocket": {"port": "http"}}, p.startup.timeout)
    spec: Obj = {
        "securityContext": pod_security(),
        "terminationGracePeriodSeconds": int(p.service.stop_timeout),
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "containers": [container],
        "volumes": volumes,
    }
    if init:
        spec["initContainers"] = init
    if selector := node_selector(plan):
        spec["nodeSelector"] = selector
    if tols := tolerations(plan):
        spec["tolerations"] = tols
    return spec


def router_pod(plan: K8sPlan) -> Obj:
    """The router's pod: the shim with the key file from the Secret, ready while the router has a healthy worker
    (its /readiness, open without a key)."""
    assert plan.router is not None
    r = plan.profile.router
    key_vols, init, key_mount = key_volumes(plan)
    mounts = [{"name": "tmp", "mountPath": "/tmp"}, *([key_mount] if key_mount else [])]
    ports = [{"name": "http", "containerPort": r.port, "protocol": "TCP"}]
    if r.metrics_host not in ("127.0.0.1", "::1", "localhost"):
        ports.append({"name": "metrics", "containerPort": r.metrics_port, "protocol": "TCP"})
    container: Obj = {
        "name": "router",
        "image": plan.image,
        "command": list(plan.router.argv),
        "env": _env({"PYTHONUNBUFFERED": "1", **plan.router.env}),
        "ports": ports,
        "securityContext": container_security(),
        "volumeMounts": mounts,
        # the router may wait for its workers before it serves: give it their cold start too
        "startupProbe": startup_probe(
            {"httpGet": {"path": "/health", "port": "http"}}, int(plan.profile.startup.timeout) + 120
        ),
        "readinessProbe": {"httpGet": {"path": "/readiness", "port": "http"}, "periodSeconds": 5},
    }
    spec: Obj = {
        "securityContext": pod_security(),
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "containers": [container],
        "volumes": [{"name": "tmp", "emptyDir": {}}, *key_vols],
    }
    if init:
        spec["initContainers"] = init
    return spec
