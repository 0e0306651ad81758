"""The speculative draft's health on SGLang 0.5.23's own serving layer (the simulator, prod's exact flags: EAGLE-3 on):
its stand-in draft's acceptance (the performance model's accept_length, ``KIMI_SERVE_SIM_ACCEPT_LENGTH``) reaches
verify through SGLang's ``sglext.spec_tokens_details`` and ``/metrics``. Healthy (the default 2.9): the figure is
reported and verify passes; dead (1.0): draft_dead, exit 1, with the figure and the fix; below the profile's floor: a
draft_below_floor warning. A restart onto the dead draft rolls back (the real verifier, systemctl stood in for)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sim_pool import SimulatorPool, prod_flags

from kimi_serve.check.launch import validated_launch
from kimi_serve.core.proc import Completed
from kimi_serve.core.settings import SIM_ACCEPT_ENV
from kimi_serve.profile.loader import load_profile
from kimi_serve.service.install import Plan
from kimi_serve.service.restart import restart
from kimi_serve.service.state import ServicePaths
from kimi_serve.service.systemctl import Systemd
from kimi_serve.service.unit import UnitContext, render_unit
from kimi_serve.service.verifier import contract_verifier
from kimi_serve.simulator import launcher
from kimi_serve.verify import run_verify
from kimi_serve.verify.render import render_lines

TIMEOUT = 60.0


def _sim(pool: SimulatorPool, accept: str | None) -> launcher.Simulator:
    return pool.get(prod_flags(), env={SIM_ACCEPT_ENV: accept} if accept else None)


@pytest.fixture(scope="module")
def healthy(simulator_pool: SimulatorPool) -> launcher.Simulator:
    return _sim(simulator_pool, None)


@pytest.fixture(scope="module")
def dead(simulator_pool: SimulatorPool) -> launcher.Simulator:
    return _sim(simulator_pool, "1.0")


def _draft(report: Any) -> Any:
    (row,) = [p for p in report.probes if p.probe == "draft"]
    return row


def test_a_healthy_draft_is_reported_and_passes(healthy: launcher.Simulator) -> None:
    report = run_verify(healthy.base_url, timeout=TIMEOUT, spec_expected=True)
    row, acc = _draft(report), report.acceptance
    assert report.exit_code == 0, render_lines(report)
    assert row.passed and not row.warnings
    assert acc.source == "probes" and acc.verify_steps >= 8 and 2.3 <= acc.accept_length <= 4.0
    assert acc.metrics_accept_length is not None and acc.metrics_accept_length > 2.3  # sglang:spec_accept_length
    assert acc.draft_path and "STAND-IN" in (acc.stand_in or "")
    assert f"mean accept length {acc.accept_length:.2f} tokens/step" in row.detail
    assert report.to_dict()["acceptance"]["accept_length"] == round(acc.accept_length, 3)


def test_a_dead_draft_fails_with_the_figure_and_the_fix(dead: launcher.Simulator) -> None:
    report = run_verify(dead.base_url, timeout=TIMEOUT)  # no caller hint: the server's /server_info says EAGLE3
    row = _draft(report)
    assert report.exit_code == 1
    assert [f.code for f in row.findings] == ["draft_dead"]
    assert all(p.passed for p in report.probes if p.probe != "draft")  # the contract itself holds
    finding = row.findings[0]
    assert f"mean accept length {report.acceptance.accept_length:.2f}" in finding.message
    assert report.acceptance.accept_length <= 1.2 and "STAND-IN" in finding.message
    assert report.acceptance.draft_path in finding.fix and "vocab" in finding.fix
    assert "FAIL draft_dead" in render_lines(report)


def test_a_draft_below_the_floor_warns(healthy: launcher.Simulator) -> None:
    """The WARN on the serving layer without a third simulator start: the healthy draft's ~2.9 against a profile floor
    of 3.5 (a weak stand-in, ``--draft-accept-length 1.6``, is the same comparison: tests/test_verify_draft.py)."""
    report = run_verify(healthy.base_url, timeout=TIMEOUT, accept_floor=3.5)
    row = _draft(report)
    assert report.exit_code == 0 and row.passed
    assert [f.code for f in row.warnings] == ["draft_below_floor"]
    assert f"mean accept length {report.acceptance.accept_length:.2f}" in row.warnings[0].message
    assert "below the expected floor 3.5 for the draft" in row.warnings[0].message
    assert report.acceptance.draft_path in row.warnings[0].message


def test_a_restart_onto_a_dead_draft_rolls_back(
    healthy: launcher.Simulator, dead: launcher.Simulator, tmp_path: Path, write_profile: Any
) -> None:
    """The unit's server is the pooled simulator on the profile's port: the good profile's is healthy, the new one's
    draft is dead. The real verifier (``kimi-serve verify`` in its own process) fails the new one; restart puts the
    good unit back and verifies it."""

    def plan(name: str, sim: launcher.Simulator) -> Plan:
        port = sim.base_url.rsplit(":", 1)[1]
        text = f"extends: sim\nserver:\n  port: {port}\nservice:\n  user: root\n"
        profile = load_profile(str(write_profile(text, name=name)))
        ctx = UnitContext(kimi_serve="/opt/kimi-serve/venv/bin/kimi-serve", package_root="/opt/kimi-serve/src")
        unit = render_unit(profile, validated_launch(profile), ctx)
        return Plan(profile, unit, ServicePaths(tmp_path, unit.name), False, True)

    def systemctl(argv: Any, *, timeout: float) -> Completed:
        return Completed(tuple(argv), 0, "", "")

    systemd = Systemd(systemctl, Path("/"))
    good, bad = plan("good", healthy), plan("bad", dead)
    assert restart(good, systemd, lambda *a: (0, "contract holds"), {}).exit_code == 0
    result = restart(bad, systemd, contract_verifier, {})
    assert result.exit_code == 1
    assert (
        result.new is not None and not result.new.ok and "draft (non-stream): mean accept length" in result.new.detail
    )
    assert result.rollback is not None and result.rollback.ok and result.rollback.profile == "good"
    assert bad.paths.unit_file.read_text() == good.unit.text
