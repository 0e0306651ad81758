"""Every environment variable kimi-serve reads, and the state root: the one place ``os.environ`` is consulted for
kimi-serve's own settings. Commands read a :class:`Settings` once (:func:`from_env`) and pass what a core function needs
as arguments; library defaults call :func:`current` at their public entry, never deep inside.

The simulator process reads its own knobs (``KIMI_SERVE_SIM_*``) at its entry point; their names live here too.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kimi_serve.core.errors import KimiServeError

# kimi-serve's own variables
STATE_DIR_ENV = "KIMI_SERVE_STATE_DIR"  # state root: patch records, service records, locks, history
PROFILE_PATH_ENV = "KIMI_SERVE_PROFILE_PATH"  # extra profile folders, ':'-separated, searched before the shipped ones
SGLANG_PYTHON_ENV = "KIMI_SERVE_SGLANG_PYTHON"  # an interpreter that can import sglang (the CPU venv in CI)
PROBE_SOCKET_ENV = "KIMI_SERVE_PROBE_SOCKET"  # a running SGLang probe server `check` asks instead of importing SGLang
SGLANG_WHEEL_ENV = "KIMI_SERVE_SGLANG_WHEEL"  # the pinned sglang wheel, for the offline patch check
WHEEL_CACHE_ENV = "KIMI_SERVE_WHEEL_CACHE"  # where scripts/fetch-sglang-wheel.sh keeps that wheel
ACCOUNTS_ROOT_ENV = "KIMI_SERVE_ACCOUNTS_ROOT"  # the root whose etc/passwd holds service.user (default /)
API_KEY_ENV = "KIMI_SERVE_API_KEY"  # verify's key when no --api-key and no profile key file is given
NO_COLOR_ENV = "NO_COLOR"  # any non-empty value: no colour on a terminal either (no-color.org)
UV_ENV = "KIMI_SERVE_UV"  # the uv binary `engine install` uses (else PATH, else next to this interpreter)
TEST_HOOK_ENV = "KIMI_SERVE_TEST_HOOK"  # TEST HOOK, never set in production (core/faults.py)
# the simulator's knobs, read by the simulator process itself at its entry point
SIM_STEP_ENV = "KIMI_SERVE_SIM_STEP_SECONDS"  # a fixed step time in seconds instead of the performance model's
SIM_PERF_ENV = "KIMI_SERVE_SIM_PERF"  # performance model parameter overrides, a JSON object (simulator/perf.py)
SIM_SPEEDUP_ENV = "KIMI_SERVE_SIM_SPEEDUP"  # run the performance model's clock this many times faster
SIM_LOAD_ENV = "KIMI_SERVE_SIM_LOAD_SECONDS"  # simulated weight-loading time
SIM_WARMUP_ENV = "KIMI_SERVE_SIM_WARMUP_SECONDS"  # simulated warmup time
# the stand-in draft's mean accept length (the performance model's accept_length: 1.0 a dead draft, 1.6 a weak one)
SIM_ACCEPT_ENV = "KIMI_SERVE_SIM_ACCEPT_LENGTH"
SIM_MAX_SPEEDUP = 1000.0  # beyond it a model step is below the event loop's timer resolution
# what each of the simulator's numeric knobs may be: a finite number within these bounds (seconds: a day at most)
SIM_BOUNDS = {
    SIM_STEP_ENV: (0.0, 60.0),
    SIM_SPEEDUP_ENV: (0.01, SIM_MAX_SPEEDUP),
    SIM_LOAD_ENV: (0.0, 86_400.0),
    SIM_WARMUP_ENV: (0.0, 86_400.0),
    SIM_ACCEPT_ENV: (1.0, 17.0),  # 1 (nothing accepted) .. num_steps + 1 (every draft token accepted, steps <= 16)
}
# set by systemd for a unit's ExecStartPost= (its main process): `wait-joined` checks that process tree
MAIN_PID_ENV = "MAINPID"

DEFAULT_STATE_ROOT = Path("/var/lib/kimi-serve")


@dataclass(frozen=True)
class Settings:
    state_root: Path = DEFAULT_STATE_ROOT
    profile_path: tuple[Path, ...] = ()
    sglang_python: str | None = None
    probe_socket: str | None = None
    sglang_wheel: Path | None = None
    wheel_cache: Path | None = None
    api_key: str | None = None
    uv: str | None = None
    test_hook: str | None = None
    accounts_root: Path = Path("/")
    main_pid: int | None = None  # $MAINPID, only inside a unit's ExecStartPost
    no_color: bool = False  # $NO_COLOR set and not empty

    @property
    def wheel_cache_dir(self) -> Path:
        return self.wheel_cache or Path.home() / ".cache" / "kimi-serve" / "wheels"


def from_env(environ: Mapping[str, str]) -> Settings:
    """The settings an environment gives (unset or empty variables keep the defaults)."""

    def get(name: str) -> str | None:
        return environ.get(name) or None

    def path(name: str) -> Path | None:
        return Path(value) if (value := get(name)) else None

    return Settings(
        state_root=path(STATE_DIR_ENV) or DEFAULT_STATE_ROOT,
        profile_path=tuple(Path(p) for p in (get(PROFILE_PATH_ENV) or "").split(os.pathsep) if p),
        sglang_python=get(SGLANG_PYTHON_ENV),
        probe_socket=get(PROBE_SOCKET_ENV),
        sglang_wheel=path(SGLANG_WHEEL_ENV),
        wheel_cache=path(WHEEL_CACHE_ENV),
        api_key=get(API_KEY_ENV),
        uv=get(UV_ENV),
        test_hook=get(TEST_HOOK_ENV),
        accounts_root=path(ACCOUNTS_ROOT_ENV) or Path("/"),
        main_pid=int(pid) if (pid := get(MAIN_PID_ENV)) and pid.isdigit() else None,
        no_color=get(NO_COLOR_ENV) is not None,
    )


def sim_number(environ: Mapping[str, str], name: str) -> float | None:
    """The simulator's numeric knob ``name`` (None when unset or empty): a finite number within its
    :data:`SIM_BOUNDS`, else a KimiServeError naming the variable (``nan``, ``inf``, ``1e400``, a word: exit 2)."""
    text = environ.get(name)
    if not text:
        return None
    lo, hi = SIM_BOUNDS[name]
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and lo <= value <= hi):
        raise KimiServeError(
            f"{text[:40]!r} is not a finite number {lo:g}..{hi:g}",
            where=name,
            hint=f"set {name} to a number {lo:g}..{hi:g}, or unset it",
        )
    return value


def current() -> Settings:
    """The settings of this process's environment (read now: tests that change the environment see the change)."""
    return from_env(os.environ)


def process_environ() -> dict[str, str]:
    """This process's environment, a copy: what a child process inherits (modules other than this one never read
    ``os.environ``; they take this, or the values of :func:`current`, as arguments)."""
    return dict(os.environ)


def state_root(state_dir: Path | None = None) -> Path:
    """kimi-serve's state root: ``state_dir`` when given, else $KIMI_SERVE_STATE_DIR, else /var/lib/kimi-serve."""
    return state_dir if state_dir is not None else current().state_root


def with_pythonpath(env: Mapping[str, str], *paths: Path | str) -> dict[str, str]:
    """``env`` with ``paths`` put in front of its PYTHONPATH (how a subprocess in another venv finds kimi_serve)."""
    parts = [str(p) for p in paths] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**env, "PYTHONPATH": os.pathsep.join(dict.fromkeys(parts))}
