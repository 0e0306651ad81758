"""The collective self-test run on this host (host/allreduce_selftest.py: the plan and the findings; process/ranks.py:
the ranks, one process each, under the deadline), in the profile's engine interpreter with the server's own
environment (its NCCL and PCIe-IPC variables, CUDA_VISIBLE_DEVICES). `up`'s preflight and `doctor` get it as their
:class:`~kimi_serve.host.doctor.Host`'s ``allreduce_selftest``."""

from __future__ import annotations

from kimi_serve.core.findings import SKIP, Finding
from kimi_serve.host.allreduce_selftest import (
    CODE,
    DEADLINE_S,
    SelftestPlan,
    SelftestReport,
    findings,
    is_event,
    plan_for,
    rank_argv,
    rank_log,
)
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile


def selftest(profile: Profile, launch: Launch, deadline_s: float = DEADLINE_S) -> list[Finding]:
    """The self-test of ``profile`` on this host, as doctor findings (a skip line where the profile has no plan)."""
    from kimi_serve.host.doctor import uses_gpus

    plan = plan_for(profile, uses_gpus(profile), deadline_s)
    if isinstance(plan, str):
        return [Finding("doctor", CODE, SKIP, plan)]
    from kimi_serve.check.launch import server_env

    return run_plan(plan, launch.argv[0], server_env(launch))


def run_plan(plan: SelftestPlan, interpreter: str, env: dict[str, str]) -> list[Finding]:
    """Run ``plan``'s ranks in ``interpreter`` with ``env`` (plus kimi-serve's package on PYTHONPATH) and say what
    they proved: `up`'s preflight and `doctor` through :func:`selftest`, the unit's ``selftest-gate`` directly."""
    from kimi_serve.core.resources import package_root
    from kimi_serve.core.settings import with_pythonpath
    from kimi_serve.process.ranks import run_ranks

    env = with_pythonpath(env, package_root())
    run = run_ranks(plan.world_size, rank_argv(interpreter, plan), env, plan.deadline_s, is_event)
    ranks = [rank_log(r.lines, r.status, r.tail) for r in run.ranks]
    return findings(SelftestReport(plan, ranks, run.hung, run.wall_s))
