"""`kimi-serve prewarm`: the profile's checkpoint into the page cache before a planned restart (docs/coldstart.md)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from kimi_serve.prewarm.page_cache import PrewarmResult
    from kimi_serve.profile.loader import Profile

PROFILE_HELP = "Profile name (configs/NAME.yaml, or a directory on $KIMI_SERVE_PROFILE_PATH) or a YAML file path."
PLAIN_EVERY_S = 5.0


def _progress(tty: bool) -> Callable[[int, int], None]:
    from kimi_serve.host.coldstart import gb

    last = [0.0]
    finished = [False]

    def show(done: int, total: int) -> None:
        if finished[0]:
            return
        finished[0] = done >= total
        pct = 100 * done / total if total else 100.0
        text = f"kimi-serve: prewarm: {gb(done)} of {gb(total)} read ({pct:.0f}%)"
        if tty:
            sys.stderr.write("\r\x1b[K" + text + ("\n" if done >= total else ""))
            sys.stderr.flush()
        elif done >= total or time.monotonic() - last[0] >= PLAIN_EVERY_S:
            last[0] = time.monotonic()
            typer.echo(text, err=True)

    return show


def render(res: PrewarmResult) -> str:
    from kimi_serve.host.coldstart import gb

    head = {
        "done": "prewarm: done",
        "nothing_to_do": "prewarm: nothing to read",
        "refused": "prewarm: REFUSED",
        "ram_short": "prewarm: STOPPED",
        "interrupted": "prewarm: INTERRUPTED",
    }[res.status]
    lines = [head + (f": {res.reason}" if res.reason else "")]
    lines.append(
        f"checkpoint {gb(res.checkpoint_bytes)} in {res.shards} shard(s); cached before "
        f"{gb(res.cached_before)}, to read {gb(res.to_read)}, room {gb(res.room)}"
    )
    if res.bytes_read:
        lines.append(f"read {gb(res.bytes_read)} in {res.seconds:.1f}s ({res.bytes_per_s / 1e9:.2f} GB/s)")
    if res.cached_after is not None:
        pct = 100 * res.cached_after / res.checkpoint_bytes if res.checkpoint_bytes else 100.0
        lines.append(f"cached now {gb(res.cached_after)} ({pct:.0f}%)")
    lines += [f"unreadable: {e}" for e in res.errors]
    return "\n".join(lines)


def prewarm(
    profile: str = typer.Option(..., "--profile", "-p", help=PROFILE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON report."),
) -> int:
    """Read the profile's checkpoint (model and draft shards) into the page cache, so the next start loads from
    memory. Reads only uncached pages; refuses when they do not fit in MemAvailable minus 10% of RAM; never drops or
    evicts anything. Exit codes: 0 cached (or nothing to read), 1 a shard could not be read, 5 refused or RAM ran
    short, 130 interrupted (what was read stays cached)."""
    from kimi_serve.core.settings import state_root
    from kimi_serve.prewarm.page_cache import exit_code_of, run_prewarm
    from kimi_serve.profile.loader import load_profile

    tty = sys.stderr.isatty()
    res = run_prewarm(
        load_profile(profile), state_root=state_root(), progress=_progress(tty) if tty or not as_json else None
    )
    if res.status == "refused" and not as_json:
        from kimi_serve.core.errors import KimiServeError

        raise KimiServeError(
            f"refused: {res.reason}",
            where="prewarm",
            exit_code=exit_code_of(res),
            hint="free memory (or add RAM); without prewarm the start reads the shards from disk",
        )
    if as_json:
        from kimi_serve.core.output import dumps, envelope

        typer.echo(dumps(envelope("prewarm", exit_code_of(res), res.to_json(), findings=_findings(res))))
    else:
        typer.echo(render(res))
    return int(exit_code_of(res))


def _findings(res: PrewarmResult) -> list[dict[str, Any]]:
    """The envelope's findings of a prewarm: each unreadable shard, a refusal or a stop; else what it did."""
    fix = {
        "refused": "free memory (or add RAM); without prewarm the start reads the shards from disk",
        "ram_short": "free memory (or add RAM); what was read stays cached",
        "interrupted": "run kimi-serve prewarm again: it reads only what is not cached",
    }
    out: list[dict[str, Any]] = [
        {"layer": "prewarm", "code": "unreadable", "status": "fail", "message": e, "fix": "check the model directory"}
        for e in res.errors
    ]
    status = "fail" if res.status in fix else "pass"
    message = render(res).splitlines()[0]
    out.append(
        {"layer": "prewarm", "code": res.status, "status": status, "message": message, "fix": fix.get(res.status, "")}
    )
    return out


def prewarm_before_restart(profile: Profile, say: Callable[[str], None]) -> dict[str, Any]:
    """`restart --prewarm`: prewarm first; a refusal is a note (the restart reads from disk), Ctrl-C stops it all."""
    from kimi_serve.core.errors import ExitCode, KimiServeError
    from kimi_serve.core.settings import state_root
    from kimi_serve.prewarm.page_cache import run_prewarm

    say("prewarming the checkpoint while the old server serves...")
    try:
        res = run_prewarm(profile, state_root=state_root(), progress=_progress(True) if sys.stderr.isatty() else None)
    except KimiServeError as exc:  # nothing to prewarm: restart as usual
        say(f"prewarm skipped: {exc.message}")
        return {"status": "skipped", "reason": exc.message}
    if res.status == "interrupted":
        raise KimiServeError(
            "interrupted during prewarm: nothing was restarted",
            where="restart --prewarm",
            hint="run it again, or restart without --prewarm",
            exit_code=ExitCode.INTERRUPTED,
        )
    say(render(res).splitlines()[0])
    return res.to_json()


def start_history(limit: int = 5) -> list[dict[str, Any]]:
    """The last recorded starts (`up`), for `status --json`."""
    from kimi_serve.core.settings import state_root
    from kimi_serve.host.starts import read_starts

    return read_starts(state_root())[-limit:]


def start_rows(profile: Profile | None, limit: int = 3) -> list[tuple[str, str]]:
    """`status` lines: the last starts against the disk floor; with a profile, the next start's prediction."""
    from kimi_serve.host.starts import describe_start

    starts = start_history(limit)
    rows = [("last start", describe_start(s)) for s in reversed(starts)] or [("last start", "none recorded")]
    if profile:
        from kimi_serve.core.settings import state_root
        from kimi_serve.host.floor import prediction_line

        rows.append(("next start", prediction_line(profile, state_root())))
    return rows


def register(app: typer.Typer) -> None:
    app.command("prewarm")(prewarm)
