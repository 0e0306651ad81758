"""The Kubernetes view of a profile: what changes when the same profile runs in pods, as ``--set`` overrides, so
check's own rules (:func:`kimi_serve.check.launch.validated_launch`) judge the result exactly as `render` and
`check` judge the profile itself.

In a pod the pod network is the boundary, so the view listens on every interface of the pod (``server.host``,
``router.host``: 0.0.0.0), takes its key from the Secret (a profile without ``server.api_key_file`` gets the pod's
:data:`KEY_FILE`, unless it sets ``allow_unauthenticated``), addresses the replicas by their pods' stable DNS names
(``NAME-J.NAME.NAMESPACE``: a StatefulSet's pods under its headless Service, or each LeaderWorkerSet group's leader
under the Service LWS creates) and names rank 0 of a multi-node group the same way. Nothing else changes: the
server's flags are the ones `render` prints for that view.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

from kimi_serve.check.launch import validated_launch
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.profile.deployment import deployment_of
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile, display_path, with_sets
from kimi_serve.profile.topology import routed

# The image's layout (docs/kubernetes.md "The image"): the engine venv from the committed lock, kimi-serve in it.
IMAGE_PYTHON = "/opt/kimi-serve/venv/bin/python"  # a profile's own `python:` wins
IMAGE_KIMI_SERVE = "/opt/kimi-serve/venv/bin/kimi-serve"
KEY_FILE = "/etc/kimi-serve/k8s/api-key.yaml"  # the key file in the pod when the profile names none
SECRET_KEY = "api-key.yaml"  # the Secret's data key holding the key file (api-key: ..., admin-api-key: ...)
LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"  # LWS sets these in every container; Kubernetes expands $(VAR) in args
WORKER_INDEX = "$(LWS_WORKER_INDEX)"
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
NAME_MAX = 40  # room for -router, -verify-NNNNNNNN (a CronJob's Jobs), -J-R (LWS pods) within 63


@dataclass(frozen=True)
class K8sPlan:
    """Everything the manifests need that comes from the profile: the view and the launches in the pods."""

    profile: Profile  # the Kubernetes view (check's rules passed on it)
    name: str  # service.unit_name: the workloads' name
    namespace: str
    image: str
    server: Launch  # the launch in every server pod (multi-node: leader and workers alike, ranks from LWS)
    router: Launch | None  # the router's launch when routed

    @property
    def multinode(self) -> bool:
        return bool(self.profile.nodes.count > 1)

    @property
    def key_file(self) -> str | None:
        key: str | None = self.profile.server.api_key_file
        return key

    @property
    def secret(self) -> str:
        return f"{self.name}-api-key"


def _label(value: str, what: str, where: str, hint: str) -> str:
    if len(value) > NAME_MAX or not _DNS_LABEL.match(value):
        raise KimiServeError(
            f"{what} {value!r} is not a Kubernetes name (lowercase letters, digits and '-', at most {NAME_MAX})",
            where=where,
            hint=hint,
            exit_code=ExitCode.USAGE,
        )
    return value


def view_sets(profile: Profile, name: str, namespace: str) -> list[str]:
    """The ``--set`` overrides that make ``profile`` the Kubernetes view (module docstring)."""
    sets = ["server.host=0.0.0.0"]
    if not profile.server.api_key_file and not profile.allow_unauthenticated:
        sets.append(f"server.api_key_file={KEY_FILE}")
    dns = [f"{name}-{j}.{name}.{namespace}" for j in range(profile.replicas)]  # as LWS writes LWS_LEADER_ADDRESS
    if routed(profile):
        workers = [f"{host}:{profile.server.port}" for host in dns]
        sets += ["router.host=0.0.0.0", f"router.workers={json.dumps(workers)}"]
    if profile.nodes.count > 1:
        sets += [f"nodes.leader_host={dns[0]}", "nodes.rank=0"]
    return sets


def escaped(value: str) -> str:
    """``value`` as Kubernetes must be given it to pass it on unchanged: it expands ``$(VAR)`` in a container's
    command, args and env values (and in exec probes' commands), and ``$$`` is its escape for ``$``."""
    return value.replace("$", "$$")


def _in_pod(argv: tuple[str, ...], flag: str, value: str) -> tuple[str, ...]:
    out = list(argv)
    i = out.index(flag)
    out[i + 1] = value
    return tuple(out)


def plan(profile: Profile, *, namespace: str, image: str) -> K8sPlan:
    """The validated Kubernetes plan of ``profile``: its view must pass `render`'s rules (one-line error, exit 2,
    naming the key and the fix, for the first failing rule)."""
    where = display_path(profile.source)
    _label(namespace, "--namespace", where, "pass --namespace NAME (a DNS label)")
    unit, fix = profile.service.unit_name, "set service.unit_name to a DNS label (it names the workloads)"
    name = _label(unit, "service.unit_name", profile.where("service.unit_name"), fix)
    if not image.strip() or any(c.isspace() for c in image):
        raise KimiServeError(f"--image {image!r} is not an image reference", hint="pass --image REGISTRY/NAME:TAG")
    view = with_sets(profile, *view_sets(profile, name, namespace))
    # check's fast rules on the view, as `render --set ...` would run them: PP + EAGLE-3, clashing ports, a router
    # without its admin key, ... Host-only rules stay out by construction: each replica is a pod of its own (no
    # local replica ports to share, no two replicas on one box's GPUs) and listens on the pod's network.
    deployment = deployment_of(view, validated_launch(view), python=view.python or IMAGE_PYTHON, pythonpath=None)
    server = deployment.launch
    server = _with_argv(server, tuple(map(escaped, server.argv)))  # then the LWS references, which must expand
    if view.nodes.count > 1:  # one argv for every rank: LWS gives each pod its group's leader and its own index
        addr = f"{LEADER_ADDRESS}:{view.nodes.leader_port}"
        argv = _in_pod(_in_pod(server.argv, "--dist-init-addr", addr), "--node-rank", WORKER_INDEX)
        server = _with_argv(server, argv)
    router = deployment.launches[deployment.router] if deployment.router else None
    if router is not None:
        router = replace(router, argv=tuple(map(escaped, router.argv)))  # its server_args stay the router's own
    return K8sPlan(view, name, namespace, image, server, router)


def _with_argv(launch: Launch, argv: tuple[str, ...]) -> Launch:
    head = len(launch.argv) - len(launch.server_args)  # the interpreter, its flags and the module
    return replace(launch, argv=argv, server_args=argv[head:])
