"""`engine install|status`: the SGLang engine venv built from a committed lock (docs/engine.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from kimi_serve.commands.options import AsJson, emit
from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.findings import FAIL, Finding
from kimi_serve.core.report import to_json
from kimi_serve.core.settings import process_environ

engine_app = typer.Typer(
    help="The SGLang engine venv: install it from a committed lock (atomic, patched, recorded), "
    "show its state and drift.",
    no_args_is_help=True,
)

PREFIX_HELP = "The venv folder (default: the venv of the profile's `python:`, e.g. /opt/kimi-serve/venv)."
LOCK_HELP = "Which lock: gpu (the serving host) or cpu (tests, quickstart), or a lock file's path."
ENGINE_PROFILE_HELP = "Profile whose `python:` and `patch_set:` to use."
SHOWN = 25  # status's text lists this many findings (--json all)

Prefix = Annotated[Path | None, typer.Option("--prefix", help=PREFIX_HELP)]
EngineProfile = Annotated[str, typer.Option("--profile", help=ENGINE_PROFILE_HELP)]


def _profile_target(profile: str, prefix: Path | None) -> tuple[Path, tuple[str, ...]]:
    from kimi_serve.engine.prefix import profile_prefix
    from kimi_serve.profile.loader import load_profile

    prof = load_profile(profile)
    return profile_prefix(prof, prefix), prof.patch_set  # every set the profile names, applied together


@engine_app.command("install")
def install_cmd(
    prefix: Prefix = None,
    lock: Annotated[str, typer.Option("--lock", help=LOCK_HELP)] = "gpu",
    profile: EngineProfile = "prod",
    no_patches: Annotated[
        bool,
        typer.Option(
            "--no-patches",
            help="Do not apply the profile's patch set (e.g. the CPU test engine, whose tests patch copies).",
        ),
    ] = False,
    installer: Annotated[
        str | None, typer.Option("--installer", help="uv or pip (default: uv when found, else pip).")
    ] = None,
    interpreter: Annotated[
        str,
        typer.Option(
            "--interpreter",
            help="copy: a standalone copy of the base Python inside the prefix, so the unit's user can run it "
            "wherever the host's own Python lives (/root, /home); link: the venv links to the base Python.",
        ),
    ] = "copy",
    python: Annotated[
        str | None,
        typer.Option(
            "--python",
            help="The Python to build from (copy or link): default this one when it has the lock's version, "
            "else pythonX.Y on PATH.",
        ),
    ] = None,
    no_kimi_serve: Annotated[
        bool,
        typer.Option(
            "--no-kimi-serve",
            help="Leave kimi-serve itself out of the engine (a test engine whose users put kimi-serve's source on "
            "its PYTHONPATH); units then take their start gate from the kimi-serve that installs them.",
        ),
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the plan; change nothing.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No installer progress.")] = False,
    as_json: AsJson = False,
) -> int:
    """Build the engine venv from a lock, atomically; patch it and record what was installed; on a GPU host, warm
    the JIT caches with the engine's own nvcc (75: busy)."""
    from kimi_serve.engine.install import install_and_warm
    from kimi_serve.engine.plan import make_plan
    from kimi_serve.engine.warm import host_warm_plan
    from kimi_serve.service.hardening import CACHE_ROOT

    if installer not in (None, "uv", "pip"):
        raise KimiServeError(f"--installer {installer}: unknown", hint="pass --installer uv or --installer pip")
    target, patch_set = _profile_target(profile, prefix)
    plan = make_plan(
        target, lock, None if no_patches else patch_set, profile, installer, interpreter, not no_kimi_serve, python
    )
    pins = {name: pin.version for name, pin in plan.lock.pins.items()}
    warm = host_warm_plan(plan.prefix, pins, CACHE_ROOT, process_environ())
    if dry_run:

        def plan_text() -> str:
            d = to_json(plan)
            copied = " (copied into the prefix)" if d["interpreter"] == "copy" else " (linked)"
            replaces = "replace the existing venv" if d["replaces_existing"] else "move it into place"
            link = f"  {d['link']} is a link to {d['prefix']}: the venv is built there, the link stays"
            return "\n".join(
                [
                    f"would install the {d['lock']} lock ({d['packages']} packages, sglang {d['sglang']}, "
                    f"sha256 {d['lock_sha256'][:12]}) into {d['prefix']}",
                    f"  installer: {d['installer']} ({d['installer_path']}), "
                    f"python {d['python_version']} from {d['python']}{copied}",
                    f"  build in {d['staging']}, then {replaces}",
                    f"  patch set: {d['patch_set'] or 'none'}; install lock: {d['lock_path']}",
                    *([link] if d["link"] else []),
                    f"  warm caches: {'then ' + warm.why if warm.run else 'skipped: ' + warm.why}",
                    "dry run: nothing changed",
                ]
            )

        data = {"dry_run": True, "plan": to_json(plan), "warm": to_json(warm)}
        return emit(as_json, 0, plan_text, command="engine-install", data=data)
    progress = not quiet and not as_json and sys.stderr.isatty()
    result, warmed = install_and_warm(plan, warm, progress=progress)

    def install_text() -> str:
        rec = result.record
        linked = f" (the link {plan.link} points there)" if plan.link else ""
        versions = ", ".join(f"{k} {v}" for k, v in rec["versions"].items())
        where, own = rec["interpreter"], rec["kimi_serve"]
        applied = f" ({len(rec['patches'])} patches applied)" if rec["patch_set"] else ""
        return "\n".join(
            [
                f"installed the {rec['lock']} lock ({rec['packages']} packages, sha256 {rec['lock_sha256'][:12]}) "
                f"into {plan.prefix}{linked} with {rec['installer']} in {result.seconds:.1f} s",
                f"  python {rec['python']}" + (f"; {versions}" if versions else ""),
                f"  interpreter: {plan.prefix / where['path']} (a copy of {where['base']})"
                if where["kind"] == "copy"
                else f"  interpreter: {where['base']} (linked; the unit's user must be able to run it)",
                f"  kimi-serve {own['version']}: {plan.prefix / own['script']}" if own else "  kimi-serve: left out",
                f"  patch set: {rec['patch_set'] or 'none'}{applied}",
                *(f"  {line}" for line in warmed),
            ]
        )

    body = {"dry_run": False, **to_json(result), "warm": {**to_json(warm), "outcome": warmed}}
    return emit(as_json, 0, install_text, command="engine-install", data=body)


@engine_app.command("status")
def status_cmd(
    prefix: Prefix = None,
    profile: EngineProfile = "prod",
    lock: Annotated[
        str | None,
        typer.Option("--lock", help="Compare with this lock (default: the one the venv was installed from)."),
    ] = None,
    as_json: AsJson = False,
) -> int:
    """Versions, lock hash, patch state and drift from the lock; exit 0 when it all matches, else 1."""
    from kimi_serve.engine.status import engine_status

    target, _ = _profile_target(profile, prefix)
    st = engine_status(target, lock)

    def text() -> None:
        rec = st.record or {}
        versions = ", ".join(f"{k} {v}" for k, v in st.versions.items())
        typer.echo(f"engine {st.prefix}: python {st.python}" + (f"; {versions}" if versions else ""))
        typer.echo(
            f"  lock: {st.lock.name} sha256 {st.lock.sha256[:12]} ({len(st.lock.pins)} packages); installed "
            f"from {str(rec.get('lock_sha256', 'unknown'))[:12]} at {rec.get('installed_at', 'unknown time')}"
        )
        typer.echo(f"  patch set: {st.patch_set}: {st.patch_state}" if st.patch_set else "  patch set: none")
        where, own = rec.get("interpreter") or {}, rec.get("kimi_serve") or {}
        if where.get("kind") == "copy":
            typer.echo(f"  interpreter: {st.prefix / where['path']} (a copy of {where['base']})")
        elif where:
            typer.echo(f"  interpreter: {where.get('base')} (linked: the unit's user must be able to run it)")
        if own:
            typer.echo(f"  kimi-serve {own.get('version')}: " + ("not this one" if st.kimi_serve else "this one"))
        if st.omitted:
            typer.echo(f"  left out by the {st.lock.name} lock on purpose: {len(st.omitted)} GPU-only packages")
        if not found:
            typer.echo("  matches the lock: no drift, no dependency conflicts")
            return
        typer.echo(f"  {len(found)} findings:")
        for f in found[:SHOWN]:
            typer.echo(f"    - {f.message}")
        if len(found) > SHOWN:
            typer.echo(f"    ... and {len(found) - SHOWN} more (--json lists all)")
        typer.echo(f"  fix: {st.fix}")

    found = [Finding("engine", "drift", FAIL, line, st.fix) for line in st.findings()]
    return emit(as_json, 0 if st.ok else 1, text, command="engine-status", data=to_json(st), findings=found)


def register(app: typer.Typer) -> None:
    app.add_typer(engine_app, name="engine")
