"""A kimi-serve zygote for the kill-point tests: one interpreter that has imported kimi-serve's CLI and the modules
its host-changing commands use, and forks a child per run. Each child is a real process of its own (its own pid,
environment, working directory and output files), SIGKILLed by the fault hook like a fresh `python -m kimi_serve`,
only without the ~0.3 s of CPU a fresh interpreter spends importing. The kill-point tests start a few hundred runs.

    python tests/zygote.py SOCKET          serve on the unix socket SOCKET until stdin closes

A request is one JSON line: ``{"argv": [...], "env": {...}, "cwd": "...", "out": PATH, "err": PATH}`` runs
``kimi-serve ARGV``; with ``"script": PATH`` it runs that file as ``__main__`` with ``sys.argv = [PATH, *argv]``.
The reply is ``{"pid": N}`` once forked, then ``{"returncode": N}`` when the child is gone (-N: killed by signal N,
as subprocess reports it). Runs may overlap (each request is its own connection).

The client side is :class:`Zygote`.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import typing
from pathlib import Path

HERE = Path(__file__).resolve().parent
# what the kill-point tests' commands import: loaded once here, so no child pays for them
PRELOAD = (
    "kimi_serve.cli",
    "kimi_serve.commands.service_cmds",
    "kimi_serve.commands.patches_cmd",
    "kimi_serve.service.install",
    "kimi_serve.service.restart",
    "kimi_serve.service.uninstall",
    "kimi_serve.service.status",
    "kimi_serve.check.report",
    "kimi_serve.patches",
    "jinja2",
    "yaml",
)


def _child(request: dict[str, object]) -> None:
    """In the forked child: become the requested run, then exit with its status (never returns)."""
    code = 1
    try:
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in dict(request["env"]).items()})  # type: ignore[arg-type]
        os.chdir(str(request["cwd"]))
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(str(request["out"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        err = os.open(str(request["err"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        argv = [str(a) for a in request["argv"]]  # type: ignore[attr-defined]
        script = request.get("script")
        if script:
            import runpy

            sys.argv = [str(script), *argv]
            sys.path[0] = str(Path(str(script)).parent)
            runpy.run_path(str(script), run_name="__main__")
            code = 0
        else:
            from kimi_serve.cli import main

            sys.argv = ["kimi-serve", *argv]
            sys.path[0] = os.getcwd()  # as `python -m kimi_serve` has it
            code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int) and exc.code is not None:
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - an uncaught exception: traceback and exit 1, as the interpreter does
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            import atexit

            atexit._run_exitfuncs()  # what the interpreter runs at exit (the zygote registered none of its own)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve(path: str) -> None:
    for name in PRELOAD:
        __import__(name)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path + ".new")
    server.listen(16)
    os.rename(path + ".new", path)  # the path appears listening: a client that sees it never meets a refused connect
    running: dict[int, tuple[socket.socket, typing.TextIO]] = {}  # pid -> the connection waiting for its status
    while True:
        # the zygote ends when the test process that started it goes (its stdin closes): no orphan after a SIGKILL.
        # No thread watches stdin or the children: a fork copies only the calling thread, and a lock another thread
        # held would stay held in the child.
        ready, _, _ = select.select([server, sys.stdin], [], [], 0.02 if running else None)
        if sys.stdin in ready:
            return
        if server in ready:
            conn, _ = server.accept()
            f = conn.makefile("rw", encoding="utf-8")
            request = json.loads(f.readline())
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                for other, _f in running.values():
                    other.close()
                server.close()
                conn.close()
                _child(request)
            f.write(json.dumps({"pid": pid}) + "\n")
            f.flush()
            running[pid] = (conn, f)
        while running:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn, f = running.pop(pid)
            with conn, f:
                f.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")


class Zygote:
    """The client: :meth:`run` is ``subprocess.run([python, -m, kimi_serve, *argv], capture_output=True, text=True)``
    on a forked child of the zygote (started on first use, stopped with :meth:`close`)."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="kimi-zygote-")
        self._socket = os.path.join(self._dir, "s")
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def _start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "KIMI_SERVE_TEST_HOOK"}
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), self._socket], stdin=subprocess.PIPE, text=True, env=env
        )
        import time

        deadline = time.monotonic() + 60
        while not os.path.exists(self._socket):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the zygote did not start (exit {self._proc.poll()})")
            time.sleep(0.02)

    def run(
        self,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        script: str | None = None,
        timeout: float = 300,
    ) -> subprocess.CompletedProcess[str]:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
        fd, out = tempfile.mkstemp(dir=self._dir, suffix=".out")
        os.close(fd)
        fd, err = tempfile.mkstemp(dir=self._dir, suffix=".err")
        os.close(fd)
        try:
            request = {
                "argv": argv,
                "env": dict(os.environ if env is None else env),
                "cwd": cwd or os.getcwd(),
                "out": out,
                "err": err,
                **({"script": script} if script else {}),
            }
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(timeout)
                s.connect(self._socket)
                f = s.makefile("rw", encoding="utf-8")
                f.write(json.dumps(request) + "\n")
                f.flush()
                pid = json.loads(f.readline())["pid"]
                try:
                    code = json.loads(f.readline())["returncode"]
                except TimeoutError:
                    os.kill(pid, signal.SIGKILL)
                    raise subprocess.TimeoutExpired(argv, timeout) from None
            with open(out, encoding="utf-8") as o, open(err, encoding="utf-8") as e:
                return subprocess.CompletedProcess(argv, code, o.read(), e.read())
        finally:
            os.unlink(out)
            os.unlink(err)

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            self._proc.wait(timeout=30)
        self._proc = None
        import shutil

        shutil.rmtree(self._dir, ignore_errors=True)


_shared: Zygote | None = None


def shared() -> Zygote:
    """This test process's zygote (one per xdist worker), started on first use and stopped when the process exits."""
    global _shared
    if _shared is None:
        import atexit

        _shared = Zygote()
        atexit.register(_shared.close)
    return _shared


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    serve(sys.argv[1])
