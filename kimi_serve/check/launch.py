"""Launch resolution, the one place every command resolves a launch: a profile's launch as this process runs it, the
same held to the fast rules, and the environment a server process runs under."""

from __future__ import annotations

import sys

from kimi_serve.check.rules import run_rules
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.findings import Finding, error_from, failed
from kimi_serve.core.resources import package_root
from kimi_serve.core.settings import current, process_environ, with_pythonpath
from kimi_serve.profile.deployment import Deployment, deployment_of
from kimi_serve.profile.launch import Launch, build_launch, interpreter_of
from kimi_serve.profile.loader import Profile, display_path, with_sets
from kimi_serve.sglang.toolchain import toolchain_env


def engine_python(profile: Profile | None) -> str:
    """The interpreter whose SGLang serves (the one resolver): :func:`interpreter_of`; without a profile
    (`patches --patch-set`), $KIMI_SERVE_SGLANG_PYTHON, else kimi-serve's own."""
    sglang_python = current().sglang_python
    if profile is None:
        return sglang_python or sys.executable
    return interpreter_of(profile, sglang_python=sglang_python, fallback=sys.executable)


def launch_for(profile: Profile) -> Launch:
    """The profile's launch, run by the interpreter this process's settings pick (where the environment is read)."""
    return build_launch(profile, engine_python(profile), pythonpath=str(package_root()))


def fast_validate(profile: Profile) -> tuple[Launch, list[Finding]]:
    launch = launch_for(profile)
    return launch, run_rules(profile, launch)


def validated_launch(profile: Profile) -> Launch:
    """The launch, or a one-line error for the first failing fast rule (what `render`, `up`, `install-service` use)."""
    launch, findings = fast_validate(profile)
    bad = failed(findings)
    if bad:
        raise error_from(bad, more=f"run kimi-serve check {profile.cli_args()}", where=display_path(profile.source))
    return launch


def server_env(launch: Launch) -> dict[str, str]:
    """The environment a server process starts with: this process's, then the launch's own, unbuffered."""
    env = {**process_environ(), **launch.env, "PYTHONUNBUFFERED": "1"}
    if launch.engine == "sglang":  # the JIT finds the engine's own nvcc (sglang/toolchain.py), as under the unit
        env.update(toolchain_env(launch.argv[0], env, env.get("PATH", "")))
    if launch.engine == "simulator":
        env = with_pythonpath(env, package_root())
    return env


def _rank_profile(profile: Profile, node_rank: int) -> Profile:
    n = profile.nodes
    where = display_path(profile.source)
    if n.count <= 1:
        raise KimiServeError(
            f"--node-rank {node_rank}: profile {profile.name!r} is single-node (nodes.count 1)",
            where=where,
            hint="drop --node-rank, or set nodes.count and nodes.leader_host",
            exit_code=ExitCode.USAGE,
        )
    if node_rank >= n.count:
        raise KimiServeError(
            f"--node-rank {node_rank}: nodes.count is {n.count}, so the ranks are 0..{n.count - 1}",
            where=where,
            hint=f"pass --node-rank 0..{n.count - 1}",
            exit_code=ExitCode.USAGE,
        )
    return with_sets(profile, f"nodes.rank={node_rank}")


def plan_deployment(profile: Profile, node_rank: int | None = None) -> Deployment:
    """The validated deployment of ``profile`` (one-line error, exit 2, for the first failing fast rule or a
    ``node_rank`` outside the profile's nodes): what `render` prints."""
    if node_rank is not None:
        profile = _rank_profile(profile, node_rank)
    return deployment_of(profile, validated_launch(profile))
