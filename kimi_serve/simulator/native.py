"""SGLang's native ``/generate`` for the simulator, as ``http_server.generate_request`` /
``serve_generate_request`` in SGLang 0.5.23 do it: the body checked against SGLang's own request contract, then the
scripted TokenizerManager's output dict as JSON, or ``data: {...}`` SSE lines ending with ``data: [DONE]``.

One prompt per request: a batch (a list of prompts) is refused with SGLang's error shape; ``n`` > 1 samples of the
one prompt come back as SGLang returns them (a list of outputs; streamed chunks carry their ``index``).
"""

# No `from __future__ import annotations`: kept alike with server.py (FastAPI-facing code).

from collections.abc import AsyncIterator
from typing import Any


async def serve_generate(tm: Any, obj: Any, raw_request: Any) -> Any:
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
