"""The simulator's HTTP server: SGLang's OpenAI layer on a FastAPI app (routes.py), with SGLang's startup phases:
loading (port closed for ``KIMI_SERVE_SIM_LOAD_SECONDS``), warmup (health 503 for ``KIMI_SERVE_SIM_WARMUP_SECONDS``,
then one real chat request, then "The server is fired up and ready to roll!"), up. SIGTERM or Ctrl-C exits 0.
"""

# No `from __future__ import annotations`: FastAPI must see the real (locally imported) request types.

import asyncio
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from kimi_serve.core.settings import SIM_LOAD_ENV, SIM_PERF_ENV, SIM_WARMUP_ENV, sim_number
from kimi_serve.simulator.routes import ServerState, build_app, redacted_info

logger = logging.getLogger("kimi_serve.simulator")

ERROR_PREFIX = "kimi-serve simulator: error: "  # the one line a refused start prints (the dry run reports it)
_DATE_FORMAT = "%Y-%m-%d %H:%M:%S"


def _seconds(name: str, default: float) -> float:
    value = sim_number(os.environ, name)
    return default if value is None else value


def environment_problem() -> str | None:
    """What is wrong with the simulator's knobs in the environment (KIMI_SERVE_SIM_*), as one line; None when
    nothing is: checked first, so a bad value ends the process at once with that line (exit 2), not in a traceback."""
    from kimi_serve.core.errors import KimiServeError
    from kimi_serve.simulator.engine import perf_params, step_delay

    try:
        for name in (SIM_LOAD_ENV, SIM_WARMUP_ENV):
            _seconds(name, 0.0)
        step_delay()
        perf_params()
    except KimiServeError as exc:
        return exc.one_line()
    except (ValueError, TypeError, RecursionError) as exc:  # TypeError: a value that is no number
        return f"{SIM_PERF_ENV}: invalid performance model parameters: {exc}"
    return None


def _uvicorn_log_config() -> dict[str, Any]:
    import uvicorn

    config: dict[str, Any] = dict(uvicorn.config.LOGGING_CONFIG)
    config["formatters"] = {name: {**fmt} for name, fmt in config["formatters"].items()}
    for name, tail in (("default", "%(message)s"), ("access", '%(client_addr)s - "%(request_line)s" %(status_code)s')):
        config["formatters"][name].update(fmt=f"[%(asctime)s] %(levelprefix)s {tail}", datefmt=_DATE_FORMAT)
    return config


def _wait_loading(seconds: float, stop: threading.Event) -> bool:
    """Sleep through the simulated weight loading (port closed). False when SIGTERM/SIGINT arrived."""
    previous = {s: signal.signal(s, lambda signum, frame: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        return not stop.wait(seconds) if seconds > 0 else not stop.is_set()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


async def _serve(app: Any, host: str, port: int, state: ServerState, warmup: float, log_level: str) -> int:
    import uvicorn

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=_uvicorn_log_config(),
        timeout_keep_alive=5,
        log_level=log_level.lower() if log_level.lower() in uvicorn.config.LOG_LEVELS else "info",
    )
    server = uvicorn.Server(config)

    async def warm() -> None:
        while not server.started:
            if server.should_exit:
                return
            await asyncio.sleep(0.05)
        await asyncio.sleep(warmup)
        try:
            await app.state.warmup_once()
        except Exception as exc:  # noqa: BLE001 - SGLang logs the failure and takes the process down
            logger.error(f"Initialization failed. warmup error: {exc}")
            state.exiting = state.failed = True
            server.should_exit = True
            return
        state.up = True
        logger.info("The server is fired up and ready to roll!")

    task = asyncio.create_task(warm())
    await server.serve()
    task.cancel()
    if not server.started:
        return 1  # bind failed (uvicorn logged "[Errno 98] ... address already in use")
    return 1 if state.failed else 0


def main(argv: list[str] | None = None) -> int:
    from kimi_serve.core.errors import KimiServeError
    from kimi_serve.core.family import family as family_of
    from kimi_serve.simulator.args import resolve
    from kimi_serve.simulator.draft import LOG_PREFIX as DRAFT_LOG_PREFIX
    from kimi_serve.simulator.tokenizer import load_tokenizer

    argv = list(sys.argv[1:] if argv is None else argv)
    problem = environment_problem()
    if problem:
        print(f"{ERROR_PREFIX}{problem}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    stop = threading.Event()
    try:
        sim = resolve(argv)  # argparse errors exit 2 with SGLang's own message
    except KimiServeError as exc:  # a draft SGLang's start-up would refuse (draft.py)
        print(f"{ERROR_PREFIX}{exc.one_line()}", file=sys.stderr)
        return int(exc.exit_code)
    sa = sim.server_args
    serving_cfg = sa.resolved_dict()
    log_level = serving_cfg.get("log_level") or "info"
    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO),
        format="[%(asctime)s] %(message)s",
        datefmt=_DATE_FORMAT,
        force=True,
    )
    logger.info(f"server_args={redacted_info(sa)}")
    logger.info(
        "kimi-serve simulator: SGLang's own OpenAI serving layer with a SCRIPTED "
        f"{family_of(sim.family).title} stand-in model (no GPU, no weights)"
    )
    for note in sim.notes:
        logger.info(f"kimi-serve simulator: {note}")
    if sim.draft is not None:
        logger.info(f"{DRAFT_LOG_PREFIX}{sim.draft.describe()}")
    if sa.speculative_algorithm:
        from kimi_serve.simulator.engine import perf_params, stand_in_acceptance

        logger.info(f"kimi-serve simulator: {stand_in_acceptance(perf_params().accept_length)}")
    loaded = load_tokenizer(sim.tokenizer_dir, sim.family)
    logger.info(f"kimi-serve simulator: tokenizer: {loaded.description}")
    load_seconds = _seconds(SIM_LOAD_ENV, 0.0)
    if load_seconds:
        logger.info(f"kimi-serve simulator: simulated weight loading for {load_seconds:g} s (port closed)")
    if not _wait_loading(load_seconds, stop):
        logger.info("kimi-serve simulator: stopped during loading")
        return 0
    state = ServerState()
    app = build_app(sim, loaded, state)
    warmup = 0.0 if serving_cfg.get("skip_server_warmup") else _seconds(SIM_WARMUP_ENV, 2.0)
    # uvicorn re-raises the SIGTERM/SIGINT it drained on; with these handlers restored that ends in exit 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: None)
    logger.info(f"Engine startup timings (s): simulated=True, tokenizer_e2e={time.perf_counter() - started:.2f}")
    return asyncio.run(_serve(app, serving_cfg["host"], int(serving_cfg["port"]), state, warmup, log_level))
