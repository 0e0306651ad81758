"""What is printed about the cold start: a prewarm's lines and its findings (`prewarm`, `restart --prewarm`: its
first step, :func:`prewarm_first`), and `status`'s start rows (the last starts against the disk floor, the next
start's prediction); docs/coldstart.md."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.findings import FAIL, PASS, Finding
from kimi_serve.core.report import Fact, to_json
from kimi_serve.host.coldstart import gb
from kimi_serve.host.floor import prediction_line
from kimi_serve.host.starts import describe_start, read_starts
from kimi_serve.prewarm.page_cache import PrewarmResult, Progress, run_prewarm
from kimi_serve.profile.loader import Profile

_HEAD = {
    "done": "prewarm: done",
    "nothing_to_do": "prewarm: nothing to read",
    "refused": "prewarm: REFUSED",
    "ram_short": "prewarm: STOPPED",
    "interrupted": "prewarm: INTERRUPTED",
}
_FIX = {
    "refused": "free memory (or add RAM); without prewarm the start reads the shards from disk",
    "ram_short": "free memory (or add RAM); what was read stays cached",
    "interrupted": "run kimi-serve prewarm again: it reads only what is not cached",
}


def render(res: PrewarmResult) -> str:
    lines = [_HEAD[res.status] + (f": {res.reason}" if res.reason else "")]
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


def text(res: PrewarmResult, exit_code: ExitCode) -> str:
    """What `prewarm` prints; a refusal is the one-line error instead (``exit_code``), with the fix."""
    if res.status == "refused":
        raise KimiServeError(f"refused: {res.reason}", where="prewarm", exit_code=exit_code, hint=_FIX["refused"])
    return render(res)


def findings(res: PrewarmResult) -> list[Finding]:
    """The envelope's findings of a prewarm: each unreadable shard, a refusal or a stop; else what it did."""
    out = [Finding("prewarm", "unreadable", FAIL, e, "check the model directory") for e in res.errors]
    status = FAIL if res.status in _FIX else PASS
    out.append(Finding("prewarm", res.status, status, render(res).splitlines()[0], _FIX.get(res.status, "")))
    return out


def start_history(state_root: Path, limit: int = 5, profile: str | None = None) -> list[dict[str, Any]]:
    """The last recorded starts (`up`), for `status --json`; with ``profile`` (a name), only that profile's."""
    return [s for s in read_starts(state_root) if profile is None or s.get("profile") == profile][-limit:]


def start_rows(profile: Profile | None, state_root: Path, limit: int = 3) -> list[Fact]:
    """`status` lines: the last starts against the disk floor (with a profile, its own starts only, and the next
    start's prediction)."""
    starts = start_history(state_root, limit, profile.name if profile else None)
    rows = [Fact("last start", describe_start(s)) for s in reversed(starts)] or [Fact("last start", "none recorded")]
    if profile:
        rows.append(Fact("next start", prediction_line(profile, state_root)))
    return rows


def prewarm_first(
    profile: Profile, *, state_root: Path, progress: Progress | None, say: Callable[[str], None]
) -> dict[str, Any]:
    """`restart --prewarm`: prewarm first; a refusal is a note (the restart reads from disk), Ctrl-C stops it all."""
    say("prewarming the checkpoint while the old server serves...")
    try:
        res = run_prewarm(profile, state_root=state_root, progress=progress)
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
    data: dict[str, Any] = to_json(res)
    return data
