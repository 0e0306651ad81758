"""The replicated-deployment branches of `install-service` and `restart`
(docs/scale-out.md, "As services"); service_cmds.py calls these when the target (its profile, or the unit directory)
says the deployment is replicas behind the router."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import typer

from kimi_serve.commands.service_io import host_lock, print_dry_run_plan, print_result, recover, say

if TYPE_CHECKING:
    from kimi_serve.service.fleet import Fleet
    from kimi_serve.service.target import Target


def _plan(target: Target, now: bool, contract: bool, replace: bool, preview: bool = False) -> Fleet:
    from kimi_serve.service.fleet import plan_fleet
    from kimi_serve.service.unit import UnitContext

    return plan_fleet(
        target,
        now=now,
        ctx=UnitContext.detect(),
        environ=os.environ,
        contract=contract,
        replace=replace,
        preview=preview,
    )


def install(target: Target, *, now: bool, replace: bool, dry_run: bool, as_json: bool, wait_lock: bool) -> int:
    from kimi_serve.service.fleet import install_fleet
    from kimi_serve.service.verifier import contract_verifier

    if dry_run:
        fleet = _plan(target, now, False, replace, preview=True)
        return _print_fleet_plan(fleet, target, as_json)
    with host_lock("install-service", wait_lock, target.systemd.root):
        recover(target)
        fleet = _plan(target, now, False, replace)
        return print_result(
            install_fleet(fleet, target.systemd, contract_verifier, os.environ),
            as_json,
            {"deployment": _members_json(fleet)},
        )


def _members_json(fleet: Fleet) -> list[dict[str, Any]]:
    return [
        {"role": m.role, "index": m.index, "unit": m.unit.name, "endpoint": m.launch.endpoint} for m, _ in fleet.members
    ]


def _print_fleet_plan(fleet: Fleet, target: Target, as_json: bool) -> int:
    from kimi_serve.core.findings import FAIL
    from kimi_serve.service.fleet import fleet_actions

    actions = fleet_actions(fleet, target.systemd)
    bad = [f for f in fleet.findings if f.status == FAIL]
    code = 1 if bad else 0
    if as_json:
        from kimi_serve.core.output import envelope

        units = [
            {"unit": p.unit.name, "unit_file": str(p.paths.unit_file), "unit_text": p.unit.text}
            for _, p in fleet.members
        ]
        typer.echo(
            json.dumps(
                envelope(
                    "install-service",
                    code,
                    {
                        "dry_run": True,
                        "unit": fleet.base,
                        "deployment": _members_json(fleet),
                        "units": units,
                        "secret_file": fleet.profile.server.api_key_file,
                        "actions": actions,
                    },
                    fleet.findings,
                ),
                indent=2,
            )
        )
        return code
    for _, plan in fleet.members:
        typer.echo(f"# {plan.paths.unit_file}")
        typer.echo(plan.unit.text)
    print_dry_run_plan(actions, bad)
    return code


def restart(target: Target, *, only: list[int], as_json: bool, wait_lock: bool) -> int:
    from kimi_serve.service.rolling import rolling_restart
    from kimi_serve.service.verifier import contract_verifier

    with host_lock("restart", wait_lock, target.systemd.root):
        recover(target)
        fleet = _plan(target, True, True, True)
        say(f"rolling restart of {fleet.base.removesuffix('.service')} (one replica at a time)...")
        result, members = rolling_restart(fleet, target.systemd, contract_verifier, os.environ, only=only, progress=say)
        return print_result(result, as_json, {"deployment": _members_json(fleet), "rolled": members}, command="restart")
