"""`kimi-serve prewarm`: the profile's checkpoint into the page cache before a planned restart (docs/coldstart.md)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import typer

from kimi_serve.commands.options import JsonOpt, ProfileOpt, emit
from kimi_serve.core.report import to_json
from kimi_serve.core.settings import state_root

if TYPE_CHECKING:
    from kimi_serve.profile.loader import Profile

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


def prewarm(
    profile: str = ProfileOpt,
    as_json: bool = JsonOpt,
) -> int:
    """Read the profile's checkpoint (model and draft shards) into the page cache, so the next start loads from
    memory. Reads only uncached pages; refuses when they do not fit in MemAvailable minus 10% of RAM; never drops or
    evicts anything."""
    from kimi_serve.prewarm.page_cache import exit_code_of, run_prewarm
    from kimi_serve.prewarm.report import findings, text
    from kimi_serve.profile.loader import load_profile

    tty = sys.stderr.isatty()
    res = run_prewarm(
        load_profile(profile), state_root=state_root(), progress=_progress(tty) if tty or not as_json else None
    )
    code = exit_code_of(res)
    return emit(
        as_json, code, lambda: text(res, code), command="prewarm", data=lambda: to_json(res), findings=findings(res)
    )


def restart_prewarm(profile: Profile, say: Callable[[str], None]) -> Callable[[], dict[str, Any]]:
    """`restart --prewarm`'s first step, its progress shown as `prewarm` shows it (a refusal is a note)."""
    from kimi_serve.prewarm.report import prewarm_first

    bar = _progress(True) if sys.stderr.isatty() else None
    return lambda: prewarm_first(profile, state_root=state_root(), progress=bar, say=say)


def register(app: typer.Typer) -> None:
    app.command("prewarm")(prewarm)
