"""Starting the simulator from the kimi-serve side (no sglang import here): build the command line and environment,
run it as a child, wait for readiness, stop it.

The interpreter comes from :func:`kimi_serve.sglang.site.require_sglang_python` (``$KIMI_SERVE_SGLANG_PYTHON``, the
profile's ``python``, this interpreter). The child gets the kimi_serve package on its PYTHONPATH so
``python -m kimi_serve.simulator`` resolves.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.keyfile import key_file_problem
from kimi_serve.core.proc import python_argv
from kimi_serve.core.resources import package_root
from kimi_serve.core.settings import SIM_LOAD_ENV, SIM_WARMUP_ENV, process_environ, with_pythonpath
from kimi_serve.process import ready
from kimi_serve.process.child import Server

MODULE = "kimi_serve.simulator"
LOG_HEAD_BYTES = 1 << 20  # the start's lines (the server_args line is a few KiB); requests are logged after them


def with_flag(args: list[str], flag: str, value: str) -> list[str]:
    """``args`` with ``flag``'s value replaced (or the flag appended); handles ``--flag V`` and ``--flag=V``."""
    out: list[str] = []
    i, seen = 0, False
    while i < len(args):
        a = args[i]
        if a == flag and i + 1 < len(args):
            out += [flag, value]
            seen, i = True, i + 2
            continue
        if a.startswith(flag + "="):
            out.append(f"{flag}={value}")
            seen = True
        else:
            out.append(a)
        i += 1
    return out if seen else out + [flag, value]


def flag_value(args: list[str], flag: str) -> str | None:
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def check_config_file(args: list[str], where: str) -> None:
    """SGLang's ``--config FILE`` (the API key file) must follow the key-file rules (:mod:`kimi_serve.core.keyfile`)."""
    config = flag_value(args, "--config")
    problem = key_file_problem(config) if config else None
    if problem:
        raise KimiServeError(problem[0], where=where, hint=problem[1], exit_code=ExitCode.ENVIRONMENT)


def command(python: str, server_args: list[str]) -> list[str]:
    return [*python_argv(python, "-m", MODULE), *server_args]


def environment(
    base: dict[str, str] | None = None, *, warmup: float | None = None, load: float | None = None
) -> dict[str, str]:
    env = with_pythonpath(process_environ() if base is None else base, package_root())
    env["PYTHONUNBUFFERED"] = "1"
    if warmup is not None:
        env[SIM_WARMUP_ENV] = f"{warmup:g}"
    if load is not None:
        env[SIM_LOAD_ENV] = f"{load:g}"
    return env


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class Simulator:
    """A running simulator child (:class:`kimi_serve.process.child.Server`: its own session, so SGLang-style kill paths
    cannot reach the parent), started and waited on through :mod:`kimi_serve.process.ready`."""

    server: Server
    base_url: str
    log_path: Path

    @classmethod
    def start(cls, argv: list[str], env: dict[str, str], base_url: str, log_path: Path) -> Simulator:
        log_path.unlink(missing_ok=True)  # one run per log file
        return cls(ready.start(argv, env, log_path), base_url, log_path)

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.server.log_tail(lines))

    def said(self, prefix: str) -> str | None:
        """What the simulator logged after ``prefix`` (its draft line, its refusal), the first time; None if it did not.
        Both come before it serves, so only the log's head is read."""
        try:
            with self.log_path.open("rb") as log:
                head = log.read(LOG_HEAD_BYTES).decode("utf-8", errors="replace")
        except OSError:
            return None
        for line in head.splitlines():
            at = line.find(prefix)
            if at >= 0:
                return line[at + len(prefix) :].strip()
        return None

    def wait_ready(self, timeout: float) -> float:
        """Seconds until ``/health`` answered 200 (:func:`kimi_serve.process.ready.wait_until_ready`); KimiServeError
        if the child exits (4) or time runs out (3)."""
        from kimi_serve.verify.target import parse_target

        return ready.wait_until_ready(
            self.server,
            parse_target(self.base_url),
            timeout=timeout,
            what="the simulator",
            timeout_hint="raise the startup timeout; a cold sglang import takes ~10-25 s on 2 cores",
        )

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM to the simulator's main process (as SGLang wants it), SIGKILL to its group if it lingers; its exit
        status."""
        code = self.server.stop(timeout)
        self.server.close()
        return code
