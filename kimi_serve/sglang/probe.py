"""Run SGLang's own argument handling on an argv, inside an interpreter that has SGLang (no GPU needed).

Invoked by :mod:`kimi_serve.check.sglang_tier` as ``PYTHON -m kimi_serve.sglang.probe`` with a JSON request on stdin:
``{"args": [...], "platform": "sm120" | null, "also": [[...], ...]}``; prints one JSON object on stdout:
``{"sglang_version", "parse": {"ok", "error"}, "resolve": {"ok", "error", "values"}, "also": [...]}``, where
``also`` (optional: the other ranks of a multi-node launch) holds one such result per further argv, probed in the same
interpreter so SGLang is imported once. ``--serve SOCKET`` keeps SGLang imported and answers many requests
(:func:`serve`; the test suite runs one per session, ``$KIMI_SERVE_PROBE_SOCKET``).

1. Parse with SGLang's real parser (``prepare_server_args``: ``ServerArgs.add_cli_args`` plus its ``--config`` merge).
2. ``resolve_once()`` + ``check_server_args()`` under a simulated platform (``override_platform``), so SGLang's own
   rules (speculative auto-fill and rewrites, backend choices, assertions) run in CI.
Only the standard library, SGLang and :mod:`kimi_serve.sglang.platform` are imported here.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
import traceback
from typing import Any

from kimi_serve.sglang.platform import SM120_FACTS

# Resolved values worth reporting back (what SGLang will actually run with).
REPORTED = (
    "tp_size",
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "disable_overlap_schedule",
    "tool_call_parser",
    "reasoning_parser",
    "flashinfer_allreduce_fusion_backend",
    "enable_torch_symm_mem",
    "enable_symm_mem",
    "attention_backend",
    "moe_runner_backend",
    "max_running_requests",
    "mem_fraction_static",
    "chunked_prefill_size",
    "served_model_name",
    "host",
    "port",
    "trust_remote_code",
    "page_size",
    "load_format",
    "model_loader_extra_config",
    "weight_loader_prefetch_checkpoints",
    "weight_loader_prefetch_num_threads",
)
# Load formats served by SGLang's DefaultModelLoader, whose extra-config keys it validates at load time.
DEFAULT_LOADER_FORMATS = ("auto", "safetensors", "pt", "fastsafetensors", "npcache", "instanttensor")


def _error(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return "SGLang's parser rejected the arguments"
    text = f"{type(exc).__name__}: {exc}".strip()
    if text.endswith(":"):  # bare AssertionError: say where it came from
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        text += f" at {frame.filename.split('site-packages/')[-1]}:{frame.lineno}: {frame.line}"
    return text.splitlines()[0][:500]


def probe(args: list[str], platform: str | None) -> dict[str, Any]:
    import sglang

    out: dict[str, Any] = {"sglang_version": sglang.__version__}
    from sglang.srt.server_args import prepare_server_args

    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            server_args = prepare_server_args(list(args))
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - report SGLang's own rejection, whatever its type
        message = stderr.getvalue().strip().splitlines()
        out["parse"] = {"ok": False, "error": message[-1] if message else _error(exc)}
        return out
    out["parse"] = {"ok": True, "error": None}

    from sglang.srt import runtime_context

    facts = SM120_FACTS if platform == "sm120" else None
    try:
        ctx = runtime_context.override_platform(**facts) if facts else contextlib.nullcontext()
        with ctx:
            server_args.resolve_once()
            server_args.check_server_args()
        values = server_args.resolved_dict()
        out["resolve"] = {"ok": True, "error": None, "values": {k: values.get(k) for k in REPORTED if k in values}}
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any failure of SGLang's resolution is the finding
        out["resolve"] = {"ok": False, "error": _error(exc), "values": {}}
        return out
    out["loader"] = _loader(server_args)
    return out


def _loader(server_args: Any) -> dict[str, Any]:
    """SGLang's own check of --model-loader-extra-config (it runs when the weights load, on the GPU host)."""
    fmt = str(getattr(server_args, "load_format", "auto"))
    checked, error = fmt in DEFAULT_LOADER_FORMATS, None
    try:
        if checked:
            from sglang.srt.configs.load_config import LoadConfig
            from sglang.srt.model_loader.loader import _validate_default_loader_extra_config

            lc = LoadConfig(load_format=fmt, model_loader_extra_config=server_args.model_loader_extra_config)
            _validate_default_loader_extra_config(extra_config=lc.model_loader_extra_config, load_format=lc.load_format)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - SGLang's rejection, whatever its type
        error = _error(exc)
    return {"ok": error is None, "error": error, "checked": checked, "load_format": fmt}


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """The probe's reply to one request (its own argv, then each of ``also`` in the same interpreter)."""
    with contextlib.redirect_stdout(io.StringIO()):  # SGLang prints; keep stdout for our JSON (restored on exit)
        result = probe(request["args"], request.get("platform"))
        also = request.get("also") or []
        if also:
            result["also"] = [probe(list(a), request.get("platform")) for a in also]
    return result


def warm() -> None:
    """Import what :func:`probe` imports, once (about 20 s of CPU on 2 cores: most of a cold probe's time)."""
    with contextlib.redirect_stdout(io.StringIO()):
        import sglang  # noqa: F401
        from sglang.srt import runtime_context  # noqa: F401
        from sglang.srt.configs.load_config import LoadConfig  # noqa: F401
        from sglang.srt.model_loader.loader import _validate_default_loader_extra_config  # noqa: F401
        from sglang.srt.server_args import prepare_server_args  # noqa: F401


def mount_namespace() -> str | None:
    """This process's mount namespace (``mnt:[INODE]``): a probe server answers only clients that see the same
    files (a client inside a container would otherwise get answers about the host's files)."""
    import os

    try:
        return os.readlink("/proc/self/ns/mnt")
    except OSError:
        return None


def serve(socket_path: str) -> int:
    """A probe server: SGLang imported once, then one forked child per request on a unix socket, so every probe
    runs on fresh interpreter state (SGLang's resolution sets globals and environment variables) without paying the
    import again. The client (:func:`kimi_serve.check.sglang_tier.run_probe`) writes one JSON request line and reads
    one JSON reply line; the reply names this interpreter (``python``) and mount namespace (``mount_ns``), which the
    client checks against its own.
    Prints ``ready`` on stdout once listening; ends when stdin closes (its parent is gone)."""
    import os
    import selectors
    import socket

    logging.disable(logging.WARNING)
    warm()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(socket_path)
    os.chmod(socket_path, 0o600)
    server.listen(16)
    print("ready", flush=True)
    sel = selectors.DefaultSelector()
    sel.register(server, selectors.EVENT_READ, "accept")
    sel.register(sys.stdin, selectors.EVENT_READ, "stdin")
    try:
        while True:
            for key, _ in sel.select(timeout=1.0):
                if key.data == "stdin":
                    if not sys.stdin.readline():
                        return 0
                    continue
                conn, _ = server.accept()
                if os.fork() == 0:  # the child answers; the parent goes back to accepting
                    code = 0
                    try:
                        server.close()
                        with conn, conn.makefile("rwb") as stream:
                            request = json.loads(stream.readline())
                            sys.path[:] = [p for p in sys.path if p]  # "" would follow the client's folder
                            os.chdir(request.get("cwd") or "/")
                            os.environ.clear()
                            os.environ.update(request.get("env") or {})
                            reply = {"python": sys.executable, "mount_ns": mount_namespace(), **answer(request)}
                            stream.write(json.dumps(reply, default=str).encode() + b"\n")
                    except BaseException:  # noqa: BLE001 - the child must never return into the parent's loop
                        code = 1
                    finally:
                        os._exit(code)
                conn.close()
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(-1, os.WNOHANG)[0]:
                    pass
    finally:
        server.close()
        with contextlib.suppress(OSError):
            os.unlink(socket_path)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"] and len(argv) == 2:
        return serve(argv[1])
    request = json.load(sys.stdin)
    logging.disable(logging.WARNING)
    result = answer(request)
    json.dump(result, sys.stdout, default=str)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
