"""The service's deadlines, in one place, because they must agree: systemd's ``TimeoutStartSec`` (the ExecStartPre
collective self-test where the profile has one, a cold start, the ExecStartPost contract check) and how long
`restart` waits for ``systemctl restart`` (stopping the old server, then that whole start). A healthy 30-minute cold
start must never be cut short by either.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from kimi_serve.profile.loader import Profile

if TYPE_CHECKING:
    from kimi_serve.host.allreduce_selftest import SelftestPlan

RESTART_SEC = 10  # systemd RestartSec= between automatic restarts
START_LIMIT_BURST = 3  # automatic restarts within the interval below before systemd gives up
START_SLACK_SEC = 30  # verify's own deadline fires before systemd's: its diagnosis reaches the journal
RESTART_MARGIN_SEC = 30  # systemctl's own overhead (daemon-reload, job queueing) on top of stop + start


def start_timeout_sec(p: Profile) -> int:
    """``TimeoutStartSec``: the collective self-test's deadline (:func:`selftest_sec`), the profile's startup
    deadline, plus the contract check, plus slack."""
    return selftest_sec(p) + p.startup.timeout + math.ceil(p.verify.timeout) + START_SLACK_SEC


def selftest_sec(p: Profile) -> int:
    """What the unit's ExecStartPre ``selftest-gate`` may take: its deadline plus slack (the hung ranks' SIGTERM,
    SIGKILL), so its own verdict reaches the journal before systemd's; 0 where the profile has no self-test."""
    plan = selftest_plan(p)
    return math.ceil(plan.deadline_s) + START_SLACK_SEC if plan else 0


def selftest_plan(p: Profile) -> SelftestPlan | None:
    """The collective self-test the unit's ``selftest-gate`` runs before the server starts (service/unit.py), or None
    where the profile has none (the simulator, ``--device cpu``, multi-node)."""
    from kimi_serve.host.allreduce_selftest import SelftestPlan, plan_for
    from kimi_serve.host.doctor import uses_gpus

    plan = plan_for(p, uses_gpus(p))
    return plan if isinstance(plan, SelftestPlan) else None


def start_limit_interval_sec(p: Profile) -> int:
    """Wide enough that a server failing late in every cold start still reaches the burst limit."""
    return START_LIMIT_BURST * (start_timeout_sec(p) + RESTART_SEC)


def restart_wait_sec(p: Profile) -> float:
    """How long `restart` lets ``systemctl restart`` run: the old server's stop, then a full start."""
    return float(p.service.stop_timeout + start_timeout_sec(p) + RESTART_MARGIN_SEC)


def router_health_wait_sec(p: Profile) -> float:
    """How long the rolling restart waits for the router to see a worker healthy again (or another one healthy):
    three of its health-check windows (interval x failure threshold), and never under 30 s."""
    return float(max(30, 3 * p.router.health_check_interval * p.router.health_failure_threshold + 10))
