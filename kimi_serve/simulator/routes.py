"""The simulator's routes: SGLang's own serving classes (OpenAIServingChat, its auth middleware and error shapes)
behind SGLang's endpoints on a FastAPI app, and readiness as SGLang's TokenizerManager tracks it
(:class:`ServerState`). :mod:`kimi_serve.simulator.server` starts it through SGLang's startup phases."""

# No `from __future__ import annotations`: FastAPI must see the real (locally imported) request types.

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar, cast

Handler = TypeVar("Handler", bound=Callable[..., Any])


def _typed(decorator: Any) -> Callable[[Handler], Handler]:
    """FastAPI's route decorators keep the handler's type (mypy sees FastAPI, not installed beside kimi-serve, as
    Any, so an undecorated use would make every handler untyped)."""
    return cast(Callable[[Handler], Handler], decorator)


logger = logging.getLogger("kimi_serve.simulator")

REDACTED = "<redacted>"
_CONFIG_INFO = ("weight_version", "load_format", "reasoning_parser", "tool_call_parser", "disaggregation_mode")


class ServerState:
    """Readiness as SGLang's TokenizerManager tracks it (Starting -> Up)."""

    def __init__(self) -> None:
        self.up = False
        self.exiting = False
        self.failed = False
        self.startup_time = time.time()


def redacted_info(server_args: Any) -> dict[str, Any]:
    """``resolved_dict()`` + ``launch_command`` with the API keys blanked (the startup log line, /server_info). The
    longer key goes first: an admin key that starts with the clients' key (``K`` and ``K-admin``) is blanked whole,
    not left as ``<redacted>-admin``."""
    info: dict[str, Any] = server_args.resolved_dict()
    command = server_args.launch_command or ""
    secrets = {k: str(info[k]) for k in ("api_key", "admin_api_key") if info.get(k)}
    info.update(dict.fromkeys(secrets, REDACTED))
    for secret in sorted(secrets.values(), key=len, reverse=True):
        command = command.replace(secret, REDACTED)
    info["launch_command"] = command
    return info


async def serve_generate(tm: Any, obj: Any, raw_request: Any) -> Any:
    """SGLang's native ``/generate``, as its ``http_server`` serves it: the body checked against SGLang's request
    contract, then the output dict as JSON or ``data: {...}`` SSE lines ending with ``data: [DONE]``. One prompt per
    request (a batch is refused with SGLang's error shape); ``n`` > 1 samples come back as a list of outputs."""
    from fastapi.responses import ORJSONResponse, StreamingResponse
    from sglang.srt.entrypoints.api_contract import generate_contract_error
    from sglang.srt.utils.json_response import dumps_json, orjson_response

    from kimi_serve.simulator.engine import normalize_once

    contract_error = generate_contract_error(await raw_request.json())
    if contract_error is not None:
        return ORJSONResponse(status_code=400, content={"error": contract_error})
    try:
        normalize_once(obj)  # what TokenizerManager.generate_request does first
        if not obj.is_single and obj.batch_size != 1:  # n > 1 samples of one prompt are served (a list of outputs)
            raise ValueError("the kimi-serve simulator serves one prompt per /generate request (no batches)")
    except ValueError as exc:
        return ORJSONResponse(status_code=400, content={"error": {"message": str(exc)}})
    if obj.stream:

        async def stream_results() -> AsyncIterator[bytes]:
            try:
                async for out in tm.generate_request(obj, raw_request):
                    yield b"data: " + dumps_json(out) + b"\n\n"
            except ValueError as exc:
                error = {
                    "error": {"message": str(exc), "type": "invalid_request_error", "code": 400, "retryable": False}
                }
                yield b"data: " + dumps_json(error) + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(stream_results(), media_type="text/event-stream")
    try:
        ret = await tm.generate_request(obj, raw_request).__anext__()
    except ValueError as exc:
        return ORJSONResponse(status_code=400, content={"error": {"message": str(exc)}})
    return orjson_response(ret)


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
            **{k: tm.config_value(k) for k in _CONFIG_INFO},
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
        missing = rank is None or rank < 0
        message = "Missing or invalid rank parameter" if missing else "the simulator has no transfer engine"
        return ORJSONResponse({"error": {"message": message}}, status_code=400)

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
