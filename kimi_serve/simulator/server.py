"""The simulator's HTTP server: SGLang's OpenAI layer on a FastAPI app, with SGLang's startup phases and endpoints.

Phases, as a real SGLang start shows them to a client:
1. loading: the port is not listening (connection refused) for ``KIMI_SERVE_SIM_LOAD_SECONDS`` (default 0);
2. warmup: uvicorn serves; ``/health``, ``/health_generate`` and ``/ready`` answer 503 for
   ``KIMI_SERVE_SIM_WARMUP_SECONDS`` (default 2; ``--skip-server-warmup`` makes it 0), then one real chat request runs
   through the serving layer (as SGLang's warmup does) and "The server is fired up and ready to roll!" is logged;
3. up: health and ready answer 200 with empty bodies.
SIGTERM (or Ctrl-C) in any phase exits 0.
"""

# No `from __future__ import annotations`: FastAPI must see the real (locally imported) request types.

import asyncio
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from kimi_serve.core.settings import SIM_LOAD_ENV, SIM_PERF_ENV, SIM_WARMUP_ENV, sim_number

Handler = TypeVar("Handler", bound=Callable[..., Any])


def _typed(decorator: Any) -> Callable[[Handler], Handler]:
    """FastAPI's route decorators keep the handler's type (mypy sees FastAPI, not installed beside kimi-serve, as
    Any, so an undecorated use would make every handler untyped)."""
    return cast(Callable[[Handler], Handler], decorator)


logger = logging.getLogger("kimi_serve.simulator")

REDACTED = "<redacted>"
ERROR_PREFIX = "kimi-serve simulator: error: "  # the one line a refused start prints (the dry run reports it)


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


class ServerState:
    """Readiness as SGLang's TokenizerManager tracks it (Starting -> Up)."""

    def __init__(self) -> None:
        self.up = False
        self.exiting = False
        self.failed = False
        self.startup_time = time.time()


def _redacted_info(server_args: Any) -> dict[str, Any]:
    """``resolved_dict()`` + ``launch_command`` with the API keys blanked (the simulator's startup log line)."""
    info: dict[str, Any] = server_args.resolved_dict()
    command = server_args.launch_command or ""
    for key in ("api_key", "admin_api_key"):
        secret = info.get(key)
        if secret:
            info[key] = REDACTED
            command = command.replace(str(secret), REDACTED)
    info["launch_command"] = command
    return info


def build_app(sim: Any, loaded: Any, state: ServerState) -> Any:
    """The FastAPI app: SGLang's own serving classes, auth middleware and error shapes behind SGLang's routes."""
    from fastapi import Depends, FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import ORJSONResponse, Response
    from sglang.srt.arg_groups.overrides import model_config_of
    from sglang.srt.entrypoints.openai.protocol import (
        ChatCompletionRequest,
        CompletionRequest,
        DetokenizeRequest,
        ErrorResponse,
        ModelCard,
        ModelList,
        Tool,
    )
    from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat
    from sglang.srt.entrypoints.openai.serving_completions import OpenAIServingCompletion
    from sglang.srt.entrypoints.openai.serving_tokenize import OpenAIServingDetokenize
    from sglang.srt.managers.io_struct import GenerateReqInput
    from sglang.srt.parser.template_manager import TemplateManager
    from sglang.srt.runtime_context import get_serving
    from sglang.srt.utils.auth import AuthLevel, add_api_key_middleware, auth_level
    from sglang.srt.utils.json_response import model_json_response
    from sglang.version import __version__

    from kimi_serve.simulator.engine import CHAT_REQUEST_KEY, ScriptedTokenizerManager

    sa = sim.server_args
    model_config = model_config_of(sa)
    tm = ScriptedTokenizerManager(sa, model_config, loaded.tokenizer, sim.model_path)
    # SGLang's grammar backend (xgrammar's tokenizer info) is built once, in the background, as the scheduler builds it
    threading.Thread(target=tm.constrainer.prepare, name="grammar-backend", daemon=True).start()
    templates = TemplateManager()
    templates.initialize_templates(tm, sa.model_path, get_serving().chat_template)
    chat = OpenAIServingChat(tm, templates)
    completion = OpenAIServingCompletion(tm, templates)
    detokenize = OpenAIServingDetokenize(tm)
    serving = get_serving()

    app = FastAPI(openapi_url=None)
    app.state.openai_serving_chat = chat
    app.state.openai_serving_completion = completion
    app.state.tokenizer_manager = tm
    add_api_key_middleware(app, api_key=serving.api_key, admin_api_key=serving.admin_api_key)

    @_typed(app.exception_handler(RequestValidationError))
    async def _invalid(request: Request, exc: RequestValidationError) -> Any:  # SGLang turns FastAPI's 422 into 400
        err = ErrorResponse(message=f"{exc} {exc.errors()}", type="Bad Request", code=400)
        return ORJSONResponse(status_code=400, content=err.model_dump())

    async def json_only(raw_request: Request) -> None:
        media_type = raw_request.headers.get("content-type", "").lower().split(";", 1)[0]
        if media_type != "application/json":
            raise RequestValidationError(
                errors=[
                    {
                        "loc": ["header", "content-type"],
                        "type": "value_error",
                        "msg": "Unsupported Media Type: Only 'application/json' is allowed",
                    }
                ]
            )

    @_typed(app.get("/ready"))
    async def ready() -> Response:
        return Response(status_code=200 if state.up and not state.exiting else 503)

    @_typed(app.get("/health"))
    @_typed(app.get("/health_generate"))
    async def health() -> Response:
        return Response(status_code=200 if state.up and not state.exiting else 503)

    @_typed(app.post("/parse_function_call"))
    async def parse_function_call(raw_request: Request) -> Any:
        """SGLang's native endpoint, as its http_server has it: the installed tool-call detector's non-streaming
        parse of a given text (verify asks it about the kimi_k2 parser's faults: kimi_serve/verify/parser_faults.py)."""
        from sglang.srt.function_call.function_call_parser import FunctionCallParser

        obj = await raw_request.json()
        tools = [Tool.model_validate(t) for t in obj.get("tools") or []]
        parser = FunctionCallParser(
            tools=tools, tool_call_parser=obj.get("tool_call_parser"), tokenizer=getattr(tm, "tokenizer", None)
        )
        normal_text, calls = parser.parse_non_stream(str(obj.get("text") or ""))
        return ORJSONResponse({"normal_text": normal_text, "calls": [c.model_dump() for c in calls]})

    @_typed(app.get("/model_info"))
    async def model_info() -> dict[str, Any]:
        return {
            "model_path": sim.model_path,
            "served_model_name": tm.served_model_name,
            "tokenizer_path": serving.tokenizer_path,
            "is_generation": True,
            "preferred_sampling_params": serving.preferred_sampling_params,
            "weight_version": tm.config_value("weight_version"),
            "load_format": tm.config_value("load_format"),
            "reasoning_parser": tm.config_value("reasoning_parser"),
            "tool_call_parser": tm.config_value("tool_call_parser"),
            "disaggregation_mode": tm.config_value("disaggregation_mode"),
            "has_image_understanding": model_config.is_image_understandable_model,
            "has_audio_understanding": model_config.is_audio_understandable_model,
            "model_type": getattr(model_config.hf_config, "model_type", None),
            "architectures": getattr(model_config.hf_config, "architectures", None),
        }

    @_typed(app.get("/server_info"))
    async def server_info() -> Any:
        # SGLang's own body (build_server_info + watermark redaction), so the simulator returns what the SGLang it
        # runs on returns: the API keys in clear text unless that SGLang is patched (patch 0007).
        from sglang.srt.sampling.watermarking.core import redact_watermark_secrets
        from sglang.srt.utils.common import build_server_info
        from sglang.srt.utils.msgspec_utils import msgspec_to_builtins

        body = msgspec_to_builtins(
            redact_watermark_secrets(
                {
                    **build_server_info(sa, {}),
                    "startup_time": state.startup_time,
                    "internal_states": tm.internal_states(),  # accept length only with speculative decoding (engine.py)
                    "version": __version__,
                    "frontend": "python",
                }
            )
        )
        body["simulator"] = {
            "engine": "kimi-serve simulator",
            "tokenizer": loaded.description,
            "substitutions": sim.notes,
            "draft": sim.draft.describe() if sim.draft is not None else None,
            "draft_acceptance": tm.stand_in_acceptance(),
        }
        return ORJSONResponse(body)

    if sa.enable_metrics:

        @_typed(app.get("/metrics"))
        async def metrics() -> Response:
            # SGLang's speculative gauges (its other series are not simulated): the stand-in draft's acceptance
            return Response(tm.spec_metrics(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @_typed(app.get("/get_server_info"))
    async def get_server_info() -> Any:
        logger.warning(
            "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
            "Please use '/server_info' instead."
        )
        return await server_info()

    @_typed(app.get("/v1/models"))
    async def models() -> Any:
        card = ModelCard(id=tm.served_model_name, root=tm.served_model_name, max_model_len=model_config.context_len)
        return model_json_response(ModelList(data=[card]))

    @_typed(app.get("/v1/models/{model:path}"))
    async def retrieve_model(model: str) -> Any:
        if model != tm.served_model_name:
            return ORJSONResponse(
                status_code=404,
                content={
                    "error": {
                        "message": f"The model '{model}' does not exist",
                        "type": "invalid_request_error",
                        "param": "model",
                        "code": "model_not_found",
                    }
                },
            )
        return model_json_response(ModelCard(id=model, root=model, max_model_len=model_config.context_len))

    @_typed(app.get("/remote_instance_transfer_engine_info"))
    @_typed(auth_level(AuthLevel.ADMIN_OPTIONAL))
    async def remote_instance_transfer_engine_info(rank: int | None = None) -> Any:
        """One of SGLang's ADMIN_OPTIONAL endpoints, with its auth level: the one `verify` asks (no rank: 400)."""
        return ORJSONResponse(
            {
                "error": {
                    "message": "Missing or invalid rank parameter"
                    if rank is None or rank < 0
                    else "the simulator has no transfer engine"
                }
            },
            status_code=400,
        )

    @_typed(app.post("/v1/chat/completions", dependencies=[Depends(json_only)]))
    async def chat_completions(request: ChatCompletionRequest, raw_request: Request) -> Any:
        setattr(raw_request.state, CHAT_REQUEST_KEY, request)
        return model_json_response(await chat.handle_request(request, raw_request))

    @_typed(app.post("/v1/completions", dependencies=[Depends(json_only)]))
    async def completions(request: CompletionRequest, raw_request: Request) -> Any:
        return model_json_response(await completion.handle_request(request, raw_request))

    @_typed(app.post("/v1/detokenize", dependencies=[Depends(json_only)]))
    @_typed(app.post("/detokenize", dependencies=[Depends(json_only)]))
    async def detokenize_ids(request: DetokenizeRequest, raw_request: Request) -> Any:  # SGLang's, as capture uses it
        return model_json_response(await detokenize.handle_request(request, raw_request))

    @_typed(app.api_route("/generate", methods=["POST", "PUT"]))
    async def generate(obj: GenerateReqInput, raw_request: Request) -> Any:
        from kimi_serve.simulator.native import serve_generate

        return await serve_generate(tm, obj, raw_request)

    async def warmup_once() -> None:
        """One real request through the serving layer, as SGLang's warmup sends one before declaring readiness."""
        from starlette.requests import Request as StarletteRequest

        # The grammar backend the scheduler would build at startup (--grammar-backend); its failure fails the start
        await asyncio.to_thread(tm.constrainer.prepare)
        probe = ChatCompletionRequest(
            model=tm.served_model_name, max_tokens=8, messages=[{"role": "user", "content": "warmup"}]
        )
        raw = StarletteRequest({"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []})
        setattr(raw.state, CHAT_REQUEST_KEY, probe)
        resp = await chat.handle_request(probe, raw)
        if not hasattr(resp, "choices"):
            raise RuntimeError(f"warmup request failed: {getattr(resp, 'body', resp)!r}")

    app.state.warmup_once = warmup_once
    return app


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="[%(asctime)s] %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        force=True,
    )


def _uvicorn_log_config() -> dict[str, Any]:
    import uvicorn

    config: dict[str, Any] = dict(uvicorn.config.LOGGING_CONFIG)
    config["formatters"] = {name: {**fmt} for name, fmt in config["formatters"].items()}
    config["formatters"]["default"]["fmt"] = "[%(asctime)s] %(levelprefix)s %(message)s"
    config["formatters"]["default"]["datefmt"] = "%Y-%m-%d %H:%M:%S"
    config["formatters"]["access"]["fmt"] = (
        '[%(asctime)s] %(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s'
    )
    config["formatters"]["access"]["datefmt"] = "%Y-%m-%d %H:%M:%S"
    return config


def _wait_loading(seconds: float, stop: threading.Event) -> bool:
    """Sleep through the simulated weight loading (port closed). False when SIGTERM/SIGINT arrived."""

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
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
    _configure_logging(serving_cfg.get("log_level") or "info")
    logger.info(f"server_args={_redacted_info(sa)}")
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
    return asyncio.run(
        _serve(
            app, serving_cfg["host"], int(serving_cfg["port"]), state, warmup, serving_cfg.get("log_level") or "info"
        )
    )
