"""``python -m kimi_serve.router.shim --api-key-file FILE -- ROUTER_FLAGS``: start SGLang's router with the key read
from a file, so the key never appears on a command line (ps, /proc/PID/cmdline, the unit file).

sglang-router 0.3.2 takes its client key only as ``--api-key KEY``. This shim runs in the engine interpreter (where
``sglang_router`` is installed; PYTHONPATH holds kimi_serve), reads the key with kimi_serve's key-file rules
(:func:`kimi_serve.core.keyfile.read_key_file`: ``api-key: KEY`` YAML or a bare key, mode 600), appends ``--api-key``
to the flags in memory and calls the router's own launcher in this process. The router then is this process: its
exit status is the shim's, and SIGTERM stops it as it stops the router (the router handles it itself).

Only the standard library, yaml and kimi_serve.core are imported here: they are what the engine interpreter has.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kimi_serve.core.errors import ExitCode, KimiServeError

USAGE = "usage: python -m kimi_serve.router.shim [--api-key-file FILE] -- ROUTER_FLAGS"


def split_argv(argv: Sequence[str]) -> tuple[Path | None, list[str]]:
    """(key file or None, the router's flags) from the shim's own arguments; a KimiServeError (usage) otherwise.
    Without ``--api-key-file`` the router runs without a key (and still starts in a fraction of
    ``python -m sglang_router.launch_router``'s time: :func:`launch`)."""
    args = list(argv)
    if "--" not in args:
        raise KimiServeError("missing `--` before the router's flags", where="router shim", hint=USAGE)
    cut = args.index("--")
    own, flags = args[:cut], args[cut + 1 :]
    if own and (len(own) != 2 or own[0] != "--api-key-file" or not own[1]):
        raise KimiServeError(f"unexpected arguments {' '.join(own) or '(none)'}", where="router shim", hint=USAGE)
    if any(f == "--api-key" or f.startswith("--api-key=") for f in flags):
        raise KimiServeError(
            "--api-key among the router's flags (the key would show in ps)",
            where="router shim",
            hint="drop it: the shim passes the key from --api-key-file",
        )
    return (Path(own[1]) if own else None), flags


def router_flags(argv: Sequence[str]) -> list[str]:
    """The router's full flag list, the key from the file included (never printed)."""
    key_file, flags = split_argv(argv)
    return flags if key_file is None else [*flags, "--api-key", read_key(key_file)]


def read_key(key_file: Path) -> str:
    from kimi_serve.core.keyfile import read_key_file

    return read_key_file(key_file, where=f"router shim --api-key-file {key_file}")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        flags = router_flags(sys.argv[1:] if argv is None else argv)
    except KimiServeError as err:
        print(f"kimi-serve: error: {err.one_line()}", file=sys.stderr, flush=True)
        return int(err.exit_code)
    try:
        from sglang_router.router_args import RouterArgs
    except ImportError as exc:
        print(
            "kimi-serve: error: "
            + KimiServeError(
                f"cannot import sglang_router ({exc})",
                where="router shim",
                hint="run it with the engine interpreter (sglang-router is in the engine locks)",
                exit_code=ExitCode.ENVIRONMENT,
            ).one_line(),
            file=sys.stderr,
            flush=True,
        )
        return int(ExitCode.ENVIRONMENT)
    launch(RouterArgs, flags)  # blocks while the router serves; raises as the router itself does
    return 0


def launch(router_args: Any, flags: list[str]) -> None:
    """What ``sglang_router.launch_router`` (0.3.2) does with ``flags``: its own argument parser, then the Rust
    router. Done here step by step because that module imports ``sglang_router.mini_lb`` (the Python debugging
    balancer) and with it all of SGLang (torch, transformers): measured 41 s of imports on a loaded 2-core machine,
    against 0.25 s for the router alone. ``--mini-lb`` goes through the router's own launcher."""
    import argparse

    parser = argparse.ArgumentParser(prog="sglang-router (via kimi_serve.router.shim)")
    router_args.add_cli_args(parser, use_router_prefix=False)
    args = router_args.from_cli_args(parser.parse_args(flags), use_router_prefix=False)
    if args.mini_lb:
        from sglang_router.launch_router import launch_router

        launch_router(args)
        return
    import setproctitle
    from sglang_router.router import Router

    setproctitle.setproctitle("sglang::router")
    args._validate_router_args()
    Router.from_args(args).start()


if __name__ == "__main__":
    sys.exit(main())
