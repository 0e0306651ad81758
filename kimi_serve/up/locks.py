"""What `up` holds while its server runs (kimi_serve.core.lock): every port it listens on, an SGLang server's GPUs
(``CUDA_VISIBLE_DEVICES`` of its environment, else ``0..gpus-1``) and, shared, its engine venv's site-packages (so a
`patches apply` or `engine install` of it is refused while any number of servers run from it). Taken in one order
(venv, GPUs, ports) so two `up --wait-lock` never wait for each other in a ring; a held one exits 75 naming the holder.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.settings import process_environ
from kimi_serve.profile.deployment import Deployment
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile


def ports_of(deployment: Deployment) -> list[int]:
    """The ports `up` of the deployment listens on (the one server, or the local replicas and the router)."""
    return sorted({launch.port for m, launch in deployment.launches.items() if m.local})


def gpus_of(profile: Profile, launch: Launch, environ: dict[str, str] | None = None) -> list[str]:
    """The GPUs an SGLang server of ``profile`` takes (none for the simulator)."""
    if launch.engine != "sglang":
        return []
    env = {**(process_environ() if environ is None else environ), **launch.env}
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        return sorted(ids, key=lambda v: (not v.isdigit(), int(v) if v.isdigit() else 0, v))
    return [str(i) for i in range(profile.gpus)]


@contextlib.contextmanager
def up_locks(deployment: Deployment, *, wait: bool = False) -> Iterator[None]:
    """Hold the venv (shared), the GPUs and the ports of the deployment's servers until the block ends; exit 75
    naming the holder when another kimi-serve command has one of them (or wait, with ``wait``)."""
    from kimi_serve.core.lock import directory_lock, resource_lock

    profile, launch = deployment.profile, deployment.launch

    with contextlib.ExitStack() as stack:
        if launch.engine == "sglang":
            site = _site_packages(launch.argv[0])
            if site is not None:  # none: the preflight names what is wrong with the interpreter
                stack.enter_context(
                    directory_lock(
                        site,
                        wait=wait,
                        shared=True,
                        doing=f"is changing the SGLang in {site}: `up` would serve from it",
                    )
                )
        for gpu in gpus_of(profile, launch):
            stack.enter_context(resource_lock("up", "gpu", gpu, wait=wait))
        for port in ports_of(deployment):
            stack.enter_context(resource_lock("up", "port", str(port), wait=wait))
        yield


def _site_packages(python: str) -> Path | None:
    from kimi_serve.sglang.site import site_packages_of

    try:
        return site_packages_of(python)
    except KimiServeError:
        return None


def run_fields(deployment: Deployment, log_path: Path) -> dict[str, Any]:
    """What `up` of the deployment records for `status` (kimi_serve.core.runs): the profile, the endpoint, the log,
    and for a replicated profile its router and replicas."""
    launch, router = deployment.launch, deployment.router
    fields: dict[str, Any] = {
        "profile": deployment.profile.name,
        "engine": launch.engine,
        "endpoint": launch.endpoint,
        "port": launch.port,
        "log": str(log_path),
        "router": None,
        "replicas": [],
    }
    if router is not None:
        from kimi_serve.up.replicas import part_log

        fields["endpoint"] = router.endpoint
        fields["port"] = deployment.launches[router].port
        fields["log"] = str(part_log(log_path, router.tag))
        fields["router"] = {"endpoint": fields["endpoint"], "log": fields["log"]}
        fields["replicas"] = [
            {"index": m.index, "endpoint": m.endpoint, "log": str(part_log(log_path, m.tag))}
            for m in deployment.replicas
            if m.local
        ]
    return fields
