"""Probe what SGLang 0.5.23's ``GET /server_info`` and ``GET /get_server_info`` return, in one copy of the sglang
package; prints one JSON object.

Run with the CPU SGLang interpreter: ``python redact_server_info_probe.py SITE_DIR KEY_FILE``. SITE_DIR goes first on
sys.path, so this imports that copy of sglang (patched or not). KEY_FILE is a YAML file as kimi-serve hands it over
(``api-key: ...``, ``admin-api-key: ...``), merged by SGLang's own ``--config`` handling, so ``launch_command`` is the
one SGLang records. The routes are SGLang's own (``http_server.app``), called in process by the ASGI app's handler
coroutines. STAND-INS: the tokenizer manager behind ``_global_state`` (no model is loaded): it carries the real
resolved ServerArgs and answers ``get_internal_state`` with one empty state, as a live server's does per DP rank. (The
CPU venv from the committed lock has the real ``soundfile`` that http_server's imports need.)
"""

from __future__ import annotations

import asyncio
import json
import sys

SITE, KEY_FILE = sys.argv[1], sys.argv[2]
sys.path.insert(0, SITE)

import sglang.srt.entrypoints.http_server as http_server  # noqa: E402
from sglang.srt.server_args import prepare_server_args  # noqa: E402


class StandInTokenizerManager:
    """STAND-IN for TokenizerManager: only what /server_info reads."""

    def __init__(self, server_args: object) -> None:
        self.server_args = server_args
        self.startup_time = 0.0

    async def get_internal_state(self) -> list[dict]:
        return [{}]


def _info(argv: list[str]) -> tuple[object, dict, dict]:
    server_args = prepare_server_args(argv)
    server_args.resolve_once()
    http_server.set_global_state(
        http_server._GlobalState(
            tokenizer_manager=StandInTokenizerManager(server_args), template_manager=None, scheduler_info={}
        )
    )
    current = asyncio.run(http_server.server_info())
    deprecated = asyncio.run(http_server.get_server_info())
    return server_args, current, deprecated


server_args, info, old_info = _info(["--model-path", "dummy", "--device", "cpu", "--config", KEY_FILE])
_, unkeyed, _ = _info(["--model-path", "dummy", "--device", "cpu"])
print(
    json.dumps(
        {
            "module": http_server.__file__,
            "api_key": server_args.api_key,  # what the server itself authenticates with: must stay the real key
            "admin_api_key": server_args.admin_api_key,
            "server_info": {k: info.get(k) for k in ("api_key", "admin_api_key", "launch_command", "model_path")},
            "get_server_info": {k: old_info.get(k) for k in ("api_key", "admin_api_key", "launch_command")},
            "body": json.dumps(info, default=str),
            "unkeyed": {k: unkeyed.get(k) for k in ("api_key", "admin_api_key")},
        }
    )
)
