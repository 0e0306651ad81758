"""``python -m kimi_serve.router.shim --api-key-file FILE -- ROUTER_FLAGS``: start SGLang's router with the keys read
from a file, so no key ever appears on a command line (ps, /proc/PID/cmdline, the unit file).

sglang-router 0.3.2 takes its client key only as ``--api-key KEY``, and with that alone its worker management
(``GET/POST /workers``, ``DELETE /workers/ID``, ``/get_loads``, ``/flush_cache``) takes the clients' key too: any
client could replace the workers (measured). ``--control-plane-api-keys 'ID:NAME:admin:KEY'`` guards those routes with
a separate key and refuses the clients' there (401). So the key file must hold a distinct ``admin-api-key`` (else exit
2). The shim runs in the engine interpreter (PYTHONPATH holds kimi_serve), reads both keys by the key-file rules
(:mod:`kimi_serve.core.keyfile`), appends both flags in memory and runs the router in this process: its exit status is
the shim's, and SIGTERM stops it as it stops the router. Only the standard library, yaml and kimi_serve.core are
imported here: they are what the engine interpreter has.
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
    for flag in SECRET_FLAGS:
        if any(f == flag or f.startswith(flag + "=") for f in flags):
            raise KimiServeError(
                f"{flag} among the router's flags (the key would show in ps)",
                where="router shim",
                hint="drop it: the shim passes the keys from --api-key-file",
            )
    return (Path(own[1]) if own else None), flags


SECRET_FLAGS = ("--api-key", "--control-plane-api-keys")
CONTROL_PLANE_ID = "kimi-serve:kimi-serve:admin"  # ID:NAME:ROLE of the one control-plane key


def router_flags(argv: Sequence[str]) -> list[str]:
    """The router's full flag list, the keys from the file included (never printed)."""
    key_file, flags = split_argv(argv)
    if key_file is None:
        return flags
    client, admin = read_keys(key_file)
    return [*flags, "--api-key", client, "--control-plane-api-keys", f"{CONTROL_PLANE_ID}:{admin}"]


def read_keys(key_file: Path) -> tuple[str, str]:
    """(the clients' key, the control plane's admin key); a one-line KimiServeError when the file holds no distinct
    admin key (the router's worker management would then take the clients' key)."""
    from kimi_serve.core.keyfile import ADMIN_KEY_HINT, read_admin_key, read_key_file

    where = f"router shim --api-key-file {key_file}"
    client = read_key_file(key_file, where=where)
    admin = read_admin_key(key_file, where=where)
    if admin is None or admin == client:
        raise KimiServeError(
            "no admin-api-key distinct from the api-key: the router's worker management (/workers) would take the "
            "clients' key",
            where=where,
            hint=f"add a line 'admin-api-key: OTHER-KEY' to {key_file} ({ADMIN_KEY_HINT})",
        )
    return client, admin


def main(argv: Sequence[str] | None = None) -> int:
    try:
        flags = router_flags(sys.argv[1:] if argv is None else argv)
        try:
            from sglang_router.router_args import RouterArgs
        except ImportError as exc:
            raise KimiServeError(
                f"cannot import sglang_router ({exc})",
                where="router shim",
                hint="run it with the engine interpreter (sglang-router is in the engine locks)",
                exit_code=ExitCode.ENVIRONMENT,
            ) from None
    except KimiServeError as err:
        print(f"kimi-serve: error: {err.one_line()}", file=sys.stderr, flush=True)
        return int(err.exit_code)
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
