"""The one place kimi-serve runs a short-lived program: argv lists only (no shell), a timeout, a result object.

Long-running children (a server under `up` or `bench`, the simulator of a dry run) are started by
:mod:`kimi_serve.process.child`, which owns their lifecycles.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from kimi_serve.core.errors import ExitCode, KimiServeError

TIMED_OUT = 124  # the rc of a command killed at its timeout, as timeout(1) reports it


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    rc: int
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def describe(self) -> str:
        """One line: the command, its exit status and the last line it printed."""
        last = (self.err.strip() or self.out.strip()).splitlines()
        return f"`{' '.join(self.argv)}` exited {self.rc}" + (f": {last[-1].strip()}" if last else "")


SAFE_PATH = "-P"  # Python 3.11+: nothing is put in front of sys.path (no working directory, no script folder)


def python_argv(interpreter: str, *args: str) -> list[str]:
    """A Python child's command line: ``INTERPRETER -P ARGS``. Without ``-P``, ``-m`` and ``-c`` put the working
    directory first on sys.path, so a ``kimi_serve/``, ``sglang/`` or ``json.py`` planted where kimi-serve is run
    (/tmp, a shared folder) would run in the child, as root under sudo. PYTHONPATH is still honoured (the simulator
    and the router shim find kimi_serve through it); the flag is passed on to multiprocessing's children."""
    return [interpreter, SAFE_PATH, *args]


class Runner(Protocol):
    def __call__(self, argv: Sequence[str], *, timeout: float) -> Completed: ...


class NotInstalled(KimiServeError):
    """The program does not exist on this host."""


def run(
    argv: Sequence[str],
    *,
    timeout: float | None,
    input: str | None = None,
    env: Mapping[str, str] | None = None,
    install_hint: str | None = None,
    errors: str | None = None,
) -> Completed:
    """Run ``argv`` to completion and capture its output. A missing program raises :class:`NotInstalled` (exit 5);
    a timeout returns rc 124 with what it printed; other OS errors return rc 126 with the reason. ``timeout`` None
    waits as long as it takes (an install); ``errors="replace"`` survives output that is not UTF-8."""
    try:
        proc = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            errors=errors,
            timeout=timeout,
            input=input,
            env=dict(env) if env is not None else None,
            check=False,
        )
    except FileNotFoundError:
        raise NotInstalled(
            f"{argv[0]} is not installed", hint=install_hint or f"install {argv[0]}", exit_code=ExitCode.ENVIRONMENT
        ) from None
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return Completed(tuple(argv), TIMED_OUT, "", f"{err}\ntimed out after {timeout:g}s")
    except OSError as exc:
        return Completed(tuple(argv), 126, "", f"cannot run {argv[0]}: {exc.strerror or exc}")
    return Completed(tuple(argv), proc.returncode, proc.stdout, proc.stderr)


def stream(
    argv: Sequence[str], on_line: Callable[[str], object], *, env: Mapping[str, str] | None = None, keep: int = 200
) -> Completed:
    """Run ``argv`` to completion, stdout and stderr merged, handing each line to ``on_line`` as it comes (a long
    download shown live); ``out`` holds the last ``keep`` lines. A missing program raises FileNotFoundError."""
    with subprocess.Popen(
        list(argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=dict(env) if env is not None else None,
    ) as child:
        assert child.stdout is not None
        kept: list[str] = []
        for line in child.stdout:
            on_line(line)
            kept = [*kept[-(keep - 1) :], line]
        rc = child.wait()
    return Completed(tuple(argv), rc, "".join(kept), "")


def run_to_log(argv: Sequence[str], log: BinaryIO, *, timeout: float, env: Mapping[str, str] | None = None) -> int:
    """Run ``argv`` to completion with no stdin, stdout and stderr into the open file ``log``; its exit status, or
    :data:`TIMED_OUT` when it ran past ``timeout`` (it is killed)."""
    try:
        return subprocess.run(
            list(argv),
            env=dict(env) if env is not None else None,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        ).returncode
    except subprocess.TimeoutExpired:
        return TIMED_OUT
