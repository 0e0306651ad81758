"""The pods: the unit's least privilege carried into a securityContext, the writable volumes a read-only root needs
(the JIT caches the unit points into its CacheDirectory, /tmp, the working directory, /dev/shm for NCCL), the key
file from the Secret, GPUs from the profile, and the probes that make the contract the readiness gate.

The key: the Secret's ``api-key.yaml`` is copied by an init container into a memory-backed volume with mode 0600,
owned by the pod's user, and that one file is mounted (``subPath``) at the profile's key path. A Secret volume alone
cannot give that: its files are root's, group-readable under ``fsGroup``, and kimi-serve's key-file reader refuses
any file group or others can read. The key's value is in neither the manifest nor an argv; the argv names the file,
as on a host. Mounts: :func:`mounts` (the scratch directories and the working directory writable emptyDirs, the key
and the model directories read-only).
"""

from __future__ import annotations

import math
import posixpath
from dataclasses import dataclass
from typing import Any

from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.suites import QUICK
from kimi_serve.k8s.placement import node_selector, shm_size, tolerations
from kimi_serve.k8s.view import IMAGE_KIMI_SERVE, IMAGE_PYTHON, SECRET_KEY, K8sPlan, escaped
from kimi_serve.profile.launch import Launch
from kimi_serve.service.hardening import CACHE_ROOT, cache_environment
from kimi_serve.service.unit import floor_args
from kimi_serve.service.unit import verify_command as unit_verify_command

UID = 10001  # the pods' user and group (numeric: Kubernetes checks runAsNonRoot by uid)
STARTUP_PERIOD = 10  # seconds between startupProbe tries; the budget is the profile's startup.timeout
SECRET_DIR = "/run/kimi-serve/secret"  # where the init container reads the Secret
KEY_DIR = "/run/kimi-serve/key"  # the key's memory-backed volume, where the init container writes the copy
KEY_COPY = f"{KEY_DIR}/{SECRET_KEY}"  # the copy: mounted at the profile's key path, read there by the verify Job

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


def pod_spec(head: Obj, container: Obj, volumes: list[Obj], init: list[Obj]) -> Obj:
    """A pod's spec: ``head`` (its security context among it), then no service links and no API token."""
    spec: Obj = {**head, "enableServiceLinks": False, "automountServiceAccountToken": False, "containers": [container]}
    spec["volumes"] = volumes
    if init:
        spec["initContainers"] = init
    return spec


def _env(values: dict[str, str]) -> list[Obj]:
    return [{"name": k, "value": escaped(v)} for k, v in sorted(values.items())]


def key_volumes(plan: K8sPlan) -> tuple[list[Obj], list[Obj]]:
    """(volumes, init containers) that put the Secret's key file, 0600 and the pod user's, at :data:`KEY_COPY` in
    the ``api-key`` volume (:func:`key_need` mounts it); nothing for an unkeyed profile. Fixed paths only: no
    profile text reaches the init container."""
    if not plan.key_file:
        return [], []
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
        "command": ["install", "-m", "0600", f"{SECRET_DIR}/{SECRET_KEY}", KEY_COPY],
        "securityContext": container_security(),
        "volumeMounts": [
            {"name": "api-key-secret", "mountPath": SECRET_DIR, "readOnly": True},
            {"name": "api-key", "mountPath": KEY_DIR},
        ],
    }
    return volumes, [init]


@dataclass(frozen=True)
class Mount:
    """One mount a container needs. ``what`` names it in errors; ``key`` is the profile key it comes from (None: the
    pod's own). ``scratch``: a writable emptyDir, which another scratch need at the same path shares. ``file``: a
    single file (subPath), in which nothing can be mounted."""

    path: str
    volume: str
    what: str
    key: str | None = None
    read_only: bool = False
    sub_path: str | None = None
    scratch: bool = False
    file: bool = False

    def volume_mount(self) -> Obj:
        out: Obj = {"name": self.volume, "mountPath": self.path}
        if self.sub_path:
            out["subPath"] = self.sub_path
        if self.read_only:
            out["readOnly"] = True
        return out


def _within(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree.rstrip("/") + "/")


def key_need(plan: K8sPlan) -> list[Mount]:
    """The key file, one file of the ``api-key`` volume at the profile's path (read-only)."""
    if not plan.key_file:
        return []
    path = posixpath.normpath(plan.key_file)
    return [Mount(path, "api-key", "server.api_key_file", "server.api_key_file", True, SECRET_KEY, file=True)]


def scratch_needs(*paths: str) -> list[Mount]:
    """The pod's own writable directories (:data:`SCRATCH`)."""
    return [Mount(path, SCRATCH[path][0], f"the pod's {SCRATCH[path][1]}", scratch=True) for path in paths]


SCRATCH = {
    "/dev/shm": ("dshm", "shared memory"),
    CACHE_ROOT: ("cache", "cache directory"),
    "/tmp": ("tmp", "temporary directory"),
}


def _model_needs(plan: K8sPlan) -> tuple[Obj | None, list[Mount]]:
    """The weights: the read-only PersistentVolumeClaim ``NAME-models``, whose root is the deepest directory holding
    model.path and the draft model; each of them mounted at its own path (subPath), so nothing else the pod mounts
    lands in the claim. The simulator reads no weights."""
    p = plan.profile
    if p.engine != "sglang":
        return None, []
    named = [("model.path", p.model.path)]
    if p.speculative.enabled and p.speculative.draft_model_path:
        named.append(("speculative.draft_model_path", p.speculative.draft_model_path))
    named = [(k, posixpath.normpath(v)) for k, v in named if v]
    if not named:
        return None, []
    root = posixpath.commonpath([posixpath.dirname(v) for _k, v in named])
    volume = {"name": "models", "persistentVolumeClaim": {"claimName": f"{plan.name}-models", "readOnly": True}}
    needs = [Mount(v, "models", k, k, True, posixpath.relpath(v, root)) for k, v in named]
    return volume, needs


def mounts(plan: K8sPlan, needs: list[Mount], *, runs: tuple[str, ...]) -> list[Obj]:
    """``needs`` as one container's volumeMounts, every mountPath distinct: scratch needs at one path share the
    first one's volume, a model directory inside another (or the same) is covered by it. One line, exit 2, for what
    a pod cannot hold: two volumes at one path, a mount inside a read-only mount or a file, a volume at or above a
    program the container ``runs`` (it would hide it)."""
    kept: list[Mount] = []
    for need in needs:
        same = next((k for k in kept if k.path == need.path), None)
        if same is not None and ((same.scratch and need.scratch) or (same.volume == need.volume == "models")):
            continue
        if same is not None:
            _refuse(
                plan, need, same, f"and {same.what} would be two volumes at one mount path in the pod", "other than"
            )
        kept.append(need)
    for inner in list(kept):
        # the first read-only mount (or file) that holds it; inside a writable one the kubelet makes the mount point
        outer = next((o for o in kept if o.path != inner.path and _within(inner.path, o.path) and o.read_only), None)
        if outer is None:
            continue
        if outer.volume == inner.volume == "models":  # the draft inside the model's directory: the same claim
            kept.remove(inner)
            continue
        what = "a file" if outer.file else "read-only"
        _refuse(
            plan,
            inner,
            outer,
            f"is inside {outer.what} {outer.path}, {what} in the pod (no mount point there)",
            "outside",
        )
    for need in kept:
        hidden = next((r for r in runs if (r == need.path if need.file else _within(r, need.path))), None)
        if hidden is not None:
            key = need.key or "python"  # only the profile's interpreter can be under the pod's own directories
            fix = (
                f"set python to a path outside {need.path}"
                if key == "python"
                else f"set {key} to another path"
                if need.file
                else f"set {key} to a directory that does not hold {hidden}"
            )
            raise KimiServeError(
                f"{need.what} {need.path} would hide {hidden}, which the pod runs, under a volume",
                where=plan.profile.where(key),
                hint=fix,
            )
    return [need.volume_mount() for need in kept]


def _refuse(plan: K8sPlan, need: Mount, other: Mount, problem: str, relation: str) -> None:
    blamed, fixed = (need, other) if need.key else (other, need)  # name the profile's key (the pod's own are fixed)
    raise KimiServeError(
        f"{need.what} {need.path} {problem}",
        where=plan.profile.where(blamed.key) if blamed.key else None,
        hint=f"set {blamed.key} to a path {relation} {fixed.path}",
    )


def _volumes(volumes: list[Obj], *containers: Obj) -> list[Obj]:
    """The volumes some container mounts (a reused path leaves its own volume unmounted: not rendered)."""
    used = {m["name"] for c in containers for m in c.get("volumeMounts", [])}
    return [v for v in volumes if v["name"] in used]


def server_env(plan: K8sPlan, launch: Launch) -> dict[str, str]:
    """The launch's environment plus, as in the unit, every JIT cache in the cache volume, unbuffered output, and
    the working directory as HOME."""
    env = cache_environment(dict(launch.env))
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("HOME", plan.profile.service.working_directory)
    return env  # written with every $ escaped (_env)


def verify_command(
    plan: K8sPlan, endpoint: str, *, timeout: float, suite: str, max_tokens: int, key_file: str | None
) -> list[str]:
    """``kimi-serve verify`` of ``endpoint`` (HOST:PORT): bounded, no readiness wait, the key file at ``key_file``
    in the container; escaped for Kubernetes, which expands ``$(VAR)`` in an exec probe's command as in a
    container's."""
    extra = ["--max-tokens", str(max_tokens), *floor_args(plan.profile)]
    key = key_file if plan.key_file else None
    return [escaped(a) for a in unit_verify_command([IMAGE_KIMI_SERVE], endpoint, timeout, suite, key, extra=extra)]


def startup_probe(probe: Obj, timeout: int) -> Obj:
    """Tolerates the cold start: up to ``timeout`` seconds (the profile's startup.timeout) before the kubelet
    restarts the container."""
    return {**probe, "periodSeconds": STARTUP_PERIOD, "failureThreshold": math.ceil(timeout / STARTUP_PERIOD)}


def readiness_contract(plan: K8sPlan) -> Obj:
    """The contract as the readiness gate: the quick suite, capped like the monitoring check, every
    monitor.interval seconds; two failures in a row take the pod out of its Services."""
    p, port = plan.profile, plan.profile.server.port
    timeout = p.verify.timeout
    command = verify_command(
        plan, f"127.0.0.1:{port}", timeout=timeout, suite=QUICK, max_tokens=p.monitor.max_tokens, key_file=plan.key_file
    )
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
    volumes: list[Obj] = [shm, *({"name": name, "emptyDir": {}} for name in ("cache", "tmp", "workdir"))]
    workdir = posixpath.normpath(p.service.working_directory)
    needs = scratch_needs("/dev/shm", CACHE_ROOT, "/tmp")
    needs.append(Mount(workdir, "workdir", "service.working_directory", "service.working_directory", scratch=True))
    models, model_needs = _model_needs(plan)
    volumes += [models] if models else []
    key_vols, init = key_volumes(plan)
    volumes += key_vols
    runs = (p.python or IMAGE_PYTHON, IMAGE_KIMI_SERVE)  # the server and its readiness probe
    container_mounts = mounts(plan, [*needs, *model_needs, *key_need(plan)], runs=runs)
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
        "volumeMounts": container_mounts,
    }
    if p.engine == "sglang":
        container["resources"] = {"limits": {"nvidia.com/gpu": str(p.gpus)}}
    if serves_api:
        container["startupProbe"] = startup_probe({"httpGet": {"path": "/health", "port": "http"}}, p.startup.timeout)
        container["readinessProbe"] = readiness_contract(plan)
    else:
        container["startupProbe"] = startup_probe({"tcpSocket": {"port": "http"}}, p.startup.timeout)
    head = {"securityContext": pod_security(), "terminationGracePeriodSeconds": int(p.service.stop_timeout)}
    spec = pod_spec(head, container, _volumes(volumes, container, *init), init)
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
    key_vols, init = key_volumes(plan)
    runs = (plan.profile.python or IMAGE_PYTHON,)
    container_mounts = mounts(plan, [*scratch_needs("/tmp"), *key_need(plan)], runs=runs)
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
        "volumeMounts": container_mounts,
        # the router may wait for its workers before it serves: give it their cold start too
        "startupProbe": startup_probe(
            {"httpGet": {"path": "/health", "port": "http"}}, int(plan.profile.startup.timeout) + 120
        ),
        "readinessProbe": {"httpGet": {"path": "/readiness", "port": "http"}, "periodSeconds": 5},
    }
    return pod_spec({"securityContext": pod_security()}, container, [{"name": "tmp", "emptyDir": {}}, *key_vols], init)
