"""The replicated-deployment branches of `install-service`, `uninstall-service`, `restart` and `status`
(docs/scale-out.md, "As services"); service_cmds.py calls these when the profile (or the unit directory) says the
deployment is replicas behind the router."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from kimi_serve.service.fleet import Fleet
    from kimi_serve.service.systemctl import Systemd


def replicated(profile: str | None, sets: list[str] | None = None) -> bool:
    if not profile:
        return False
    from kimi_serve.profile.loader import load_profile
    from kimi_serve.service.deployment import is_replicated

    return is_replicated(load_profile(profile, sets or ()))


def installed(root: Path, base: str) -> bool:
    from kimi_serve.service.deployment import installed_members

    return bool(installed_members(root.resolve(), base))


def recover(systemd: Systemd, base: str) -> None:
    from kimi_serve.service.fleet import recover_fleet

    for message in recover_fleet(systemd, base):
        typer.echo(f"kimi-serve: {message}", err=True)


def _plan(
    profile: str,
    systemd: Systemd,
    unit_name: str | None,
    now: bool,
    contract: bool,
    sets: list[str] | None,
    replace: bool,
    preview: bool = False,
) -> Fleet:
    from kimi_serve.service.fleet import plan_fleet
    from kimi_serve.service.unit import UnitContext

    return plan_fleet(
        profile,
        root=systemd.root,
        unit_name=unit_name,
        now=now,
        ctx=UnitContext.detect(),
        systemd=systemd,
        environ=os.environ,
        contract=contract,
        sets=sets or (),
        replace=replace,
        preview=preview,
    )


def install(
    profile: str,
    systemd: Systemd,
    unit_name: str | None,
    *,
    now: bool,
    sets: list[str] | None,
    replace: bool,
    dry_run: bool,
    as_json: bool,
    wait_lock: bool,
) -> int:
    from kimi_serve.commands.service_cmds import _host_lock, _print_result, _unit_of
    from kimi_serve.service.fleet import install_fleet
    from kimi_serve.service.verifier import contract_verifier

    if dry_run:
        fleet = _plan(profile, systemd, unit_name, now, False, sets, replace, preview=True)
        return _print_fleet_plan(fleet, systemd, as_json)
    with _host_lock("install-service", wait_lock):
        recover(systemd, _unit_of(profile, unit_name))
        fleet = _plan(profile, systemd, unit_name, now, False, sets, replace)
        return _print_result(
            install_fleet(fleet, systemd, contract_verifier, os.environ), as_json, {"deployment": _members_json(fleet)}
        )


def _members_json(fleet: Fleet) -> list[dict[str, Any]]:
    return [
        {"role": m.role, "index": m.index, "unit": m.unit.name, "endpoint": m.launch.endpoint} for m, _ in fleet.members
    ]


def _print_fleet_plan(fleet: Fleet, systemd: Systemd, as_json: bool) -> int:
    from kimi_serve.core.findings import FAIL
    from kimi_serve.service.fleet import fleet_actions

    actions = fleet_actions(fleet, systemd)
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
    from kimi_serve.commands.service_cmds import print_dry_run_plan

    print_dry_run_plan(actions, bad)
    return code


def uninstall(systemd: Systemd, base: str, *, dry_run: bool, as_json: bool, wait_lock: bool) -> int:
    from kimi_serve.commands.service_cmds import _host_lock, _print_result
    from kimi_serve.service.fleet import uninstall_fleet

    if dry_run:
        return _print_result(
            uninstall_fleet(systemd.root, base, systemd, dry_run=True), as_json, command="uninstall-service"
        )
    with _host_lock("uninstall-service", wait_lock):
        recover(systemd, base)
        return _print_result(
            uninstall_fleet(systemd.root, base, systemd, dry_run=False), as_json, command="uninstall-service"
        )


def restart(
    profile: str,
    systemd: Systemd,
    unit_name: str | None,
    *,
    sets: list[str] | None,
    only: list[int],
    as_json: bool,
    wait_lock: bool,
) -> int:
    from kimi_serve.commands.service_cmds import _host_lock, _print_result, _say, _unit_of
    from kimi_serve.service.rolling import rolling_restart
    from kimi_serve.service.verifier import contract_verifier

    with _host_lock("restart", wait_lock):
        recover(systemd, _unit_of(profile, unit_name))
        fleet = _plan(profile, systemd, unit_name, True, True, sets, True)
        _say(f"rolling restart of {fleet.base.removesuffix('.service')} (one replica at a time)...")
        result, members = rolling_restart(fleet, systemd, contract_verifier, os.environ, only=only, progress=_say)
        return _print_result(
            result, as_json, {"deployment": _members_json(fleet), "rolled": members}, command="restart"
        )


def status(systemd: Systemd, base: str, as_json: bool) -> int:
    from kimi_serve.service.fleet_status import fleet_status

    st = fleet_status(systemd.root, base, systemd)
    if as_json:
        from kimi_serve.core.output import envelope

        typer.echo(json.dumps(envelope("status", st.exit_code, st.to_json()), indent=2))
    else:
        for label, value in st.rows():
            typer.echo(f"{label + ':':13} {value}")
    return int(st.exit_code)
