"""`patches status|apply|revert`: the SM120 source patch set in an installed SGLang."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kimi_serve.commands.options import SET_HELP, AsJson, emit
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.findings import FAIL, PASS, Finding
from kimi_serve.core.pin import patch_set_args, patches_apply
from kimi_serve.core.report import to_json
from kimi_serve.core.settings import SGLANG_PYTHON_ENV
from kimi_serve.patches.names import DEFAULT_SET

if TYPE_CHECKING:
    from kimi_serve.patches import ChangeResult, PatchSet, PatchStatus
    from kimi_serve.profile.loader import Profile

SITE_HELP = "site-packages folder holding sglang/ (default: found via --python)."
PYTHON_HELP = (
    "Interpreter whose sglang to use (default: the one `up` serves from: with --profile its python:, else "
    "$KIMI_SERVE_SGLANG_PYTHON, else the one running kimi-serve)."
)
SET_NAME_HELP = f"Patch set name or folder (default: {DEFAULT_SET}; not with --profile)."
SETS_PROFILE_HELP = "Every patch set the profile names (patch_set:), in order (revert: newest first)."
STATE_HELP = (
    "kimi-serve state root; records and backups go to DIR/patches (default: $KIMI_SERVE_STATE_DIR or "
    "/var/lib/kimi-serve)."
)
WAIT_LOCK_HELP = (
    "When another kimi-serve command changes this SGLang (or `up` serves from it), wait for it instead of exiting "
    "75 (the state is read after the wait)."
)

# The options every patches command takes.
SitePackages = Annotated[Path | None, typer.Option("--site-packages", help=SITE_HELP)]
Python = Annotated[str | None, typer.Option("--python", help=PYTHON_HELP)]
SetName = Annotated[str | None, typer.Option("--patch-set", metavar="NAME", help=SET_NAME_HELP)]
ProfileName = Annotated[str | None, typer.Option("--profile", "-p", help=SETS_PROFILE_HELP)]
Overrides = Annotated[list[str] | None, typer.Option("--set", metavar="KEY=VALUE", help=SET_HELP + " With --profile.")]
StateDir = Annotated[Path | None, typer.Option("--state-dir", help=STATE_HELP)]
WaitLock = Annotated[bool, typer.Option("--wait-lock", help=WAIT_LOCK_HELP)]

patches_app = typer.Typer(
    help="SGLang source patches for SM120: status, apply, revert (all-or-nothing, reversible).", no_args_is_help=True
)


def _target(
    site_packages: Path | None,
    python: str | None,
    set_name: str | None,
    profile: str | None = None,
    overrides: list[str] | None = None,
) -> tuple[Path, list[PatchSet], Profile | None]:
    """The site-packages and the sets a command works on: ``--patch-set`` (one), or every set of ``--profile`` (with
    its ``--set`` overrides); the SGLang is the one of ``--site-packages`` or ``--python``, else of the interpreter
    `up`, `doctor` and `check` resolve (check/launch.py's :func:`engine_python`); the profile, or None."""
    from kimi_serve.check.launch import engine_python
    from kimi_serve.patches import load_patch_set
    from kimi_serve.sglang.site import resolve_site_packages, site_packages_of

    bad = next((o for o in overrides or () if "=" not in o), None)
    if bad is not None:  # `patches --set NAME`, the old spelling of --patch-set
        raise KimiServeError(
            f"'{bad}' is not KEY=VALUE: --set overrides a profile key, a patch set is named with --patch-set",
            where="--set",
            hint=f"use {patch_set_args(bad)}" + (" (without --profile)" if profile else ""),
            exit_code=ExitCode.USAGE,
        )
    if overrides and profile is None:
        raise KimiServeError(
            "--set overrides a key of the profile, and no --profile was given",
            where="--set",
            hint="pass --profile P with --set",
            exit_code=ExitCode.USAGE,
        )
    p = None
    env_how = f"export {SGLANG_PYTHON_ENV}=PATH of the SGLang venv's python"
    if profile is None:
        sets, how = [load_patch_set(set_name or DEFAULT_SET)], env_how
    else:
        from kimi_serve.profile.loader import load_profile

        if set_name is not None:
            raise KimiServeError(
                "--patch-set and --profile both name the patch sets",
                where="--patch-set",
                hint="drop one: --profile takes every set of the profile's patch_set:",
                exit_code=ExitCode.USAGE,
            )
        p = load_profile(profile, overrides or ())
        if not p.patch_set:
            raise KimiServeError(
                f"profile {p.name} names no patch set (patch_set: is empty)",
                where=p.where("patch_set"),
                hint="pass --patch-set NAME, or add the sets to the profile's patch_set:",
                exit_code=ExitCode.USAGE,
            )
        sets = [load_patch_set(name) for name in p.patch_set]
        how = (
            f"{env_how} (or set the profile's python:)"
            if p.engine == "simulator" and not p.python
            else "point the profile's python: at the SGLang venv's python (or --set python=PATH)"
        )
    if site_packages is not None or python is not None:
        return resolve_site_packages(site_packages, python), sets, p
    resolved = engine_python(p)
    try:
        return site_packages_of(resolved), sets, p
    except KimiServeError as exc:  # none was named: the failure says how to name one
        exc.hint = f"{how}, or pass --python PATH or --site-packages DIR"
        raise


def _render(st: PatchStatus) -> None:
    typer.echo(
        f"patch set {st.set_name} for sglang {st.target_version}: sglang {st.sglang_version} in {st.site_packages}"
    )
    width = max(len(p.name) for p in st.patches)
    for p in st.patches:
        detail = f"  ({p.detail})" if p.detail else ""
        typer.echo(f"  {p.name:<{width}}  {p.state.value:<11}  {p.feature}{detail}")
    features = ", ".join(f"{name} {'on' if on else 'off'}" for name, on in st.features.items())
    typer.echo(f"features: {features}")
    if st.record:
        typer.echo(
            f"record: applied {st.record.get('applied_at')} by kimi-serve {st.record.get('kimi_serve_version')}"
            f", backups in {st.record.get('backup_dir')}"
        )
    else:
        typer.echo("record: none")
    if st.interrupted:
        from kimi_serve.patches.journal import describe

        typer.echo(f"INTERRUPTED: {describe(st.interrupted)}")


def _findings(st: PatchStatus, message: str | None, profile: str | None = None) -> list[Finding]:
    """The envelope's findings: what apply/revert did, or (status) each patch's state and an interrupted change;
    ``profile`` (``--profile P [--set ...]`` as typed): the fix names it (every set at once) rather than this set."""
    if message is not None:
        return [Finding("patches", "change", PASS, message)]
    fix = patches_apply(f"--site-packages {st.site_packages} {profile or patch_set_args(st.set_name)}")
    out = [
        Finding(
            "patches",
            p.name,
            PASS if p.state.value == "applied" else FAIL,
            f"{p.name}: {p.state.value}" + (f" ({p.detail})" if p.detail else ""),
            "" if p.state.value == "applied" else fix,
        )
        for p in st.patches
    ]
    if st.interrupted:
        from kimi_serve.patches.journal import describe

        out.append(
            Finding(
                "patches",
                "interrupted",
                FAIL,
                f"interrupted: {describe(st.interrupted)}",
                f"run {fix} (or revert): it finishes or rolls back the change first",
            )
        )
    return out


def _finish(
    profile: Profile | None,
    states: list[PatchStatus],
    as_json: bool,
    results: list[ChangeResult] | list[None],
    command: str,
    exit_code: int = 0,
) -> int:
    """The report: one set's JSON document (its status keys, plus ``changed`` and ``message`` after a change), or a
    profile's (``profile``, ``sets[]``: each set's document; the findings of every set); each set's text in order."""
    docs, findings = [], []
    for st, r in zip(states, results, strict=True):
        docs.append(to_json(st) | ({"changed": r.changed, "message": r.message} if r is not None else {}))
        findings += _findings(st, r.message if r is not None else None, profile.cli_args() if profile else None)
    data = (
        docs[0]
        if profile is None
        else {
            "profile": profile.ref or profile.name,
            "changed": any(r is not None and r.changed for r in results),
            "sets": docs,
        }
    )

    def text() -> None:
        for st, r in zip(states, results, strict=True):
            if r is not None and r.message:
                typer.echo(r.message)
            _render(st)

    return emit(as_json, exit_code, text, command=command, data=data, findings=findings)


@patches_app.command("status")
def status_cmd(
    site_packages: SitePackages = None,
    python: Python = None,
    set_name: SetName = None,
    state_dir: StateDir = None,
    as_json: AsJson = False,
    profile: ProfileName = None,
    overrides: Overrides = None,
) -> int:
    """Show each patch as applied, not applied, or conflict, and any change that was killed part-way; exit 0 only
    when every patch (of every set, with --profile) is applied and no change is interrupted (else 1)."""
    from kimi_serve.patches import status

    sp, sets, prof = _target(site_packages, python, set_name, profile, overrides)
    states = [status(sp, ps, state_dir=state_dir) for ps in sets]
    code = 0 if all(st.all_applied and not st.interrupted for st in states) else 1
    return _finish(prof, states, as_json, [None] * len(states), "patches-status", code)


@patches_app.command("apply")
def apply_cmd(
    site_packages: SitePackages = None,
    python: Python = None,
    set_name: SetName = None,
    state_dir: StateDir = None,
    as_json: AsJson = False,
    wait_lock: WaitLock = False,
    profile: ProfileName = None,
    overrides: Overrides = None,
) -> int:
    """Apply every patch or none (checked on a staging copy first); applying again is a no-op. With --profile, every
    set of the profile, all or none (a set that fails reverts the sets applied before it). One change of an SGLang
    at a time (the lock of its site-packages, exit 75); a change killed part-way is finished or rolled back first."""
    from kimi_serve.patches import apply_sets

    sp, sets, prof = _target(site_packages, python, set_name, profile, overrides)
    results = apply_sets(sp, sets, state_dir=state_dir, wait_lock=wait_lock)
    return _finish(prof, [r.status for r in results], as_json, results, "patches-apply")


@patches_app.command("revert")
def revert_cmd(
    site_packages: SitePackages = None,
    python: Python = None,
    set_name: SetName = None,
    state_dir: StateDir = None,
    as_json: AsJson = False,
    wait_lock: WaitLock = False,
    profile: ProfileName = None,
    overrides: Overrides = None,
) -> int:
    """Restore the original sglang files byte for byte (checked against the manifest afterwards: exit 1 on a
    mismatch); a no-op when not applied. With --profile, every set of the profile, newest first. Host lock and crash
    recovery as for apply."""
    from kimi_serve.patches import revert_sets

    sp, sets, prof = _target(site_packages, python, set_name, profile, overrides)
    results = revert_sets(sp, sets, state_dir=state_dir, wait_lock=wait_lock)
    return _finish(prof, [r.status for r in results], as_json, results, "patches-revert")


def register(app: typer.Typer) -> None:
    app.add_typer(patches_app, name="patches")
