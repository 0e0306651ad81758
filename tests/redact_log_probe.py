"""Probe what SGLang 0.5.23 logs as ``server_args=...`` at startup, in one copy of the sglang package; prints one JSON
object.

Run with the CPU SGLang interpreter: ``python redact_log_probe.py SITE_DIR KEY_FILE``. SITE_DIR goes first on sys.path,
so this imports that copy of sglang (patched or not), never the venv's own. KEY_FILE is a YAML file as kimi-serve hands
it over (``api-key: ...``), read by SGLang's own ``--config`` merging; the dict comes from the engine's own
``_server_args_for_logging``, the helper both startup log lines (engine.py:311, :1185) format. No stand-ins.
"""

from __future__ import annotations

import json
import sys

SITE, KEY_FILE = sys.argv[1], sys.argv[2]
sys.path.insert(0, SITE)

import sglang.srt.entrypoints.engine as engine  # noqa: E402
from sglang.srt.server_args import prepare_server_args  # noqa: E402

server_args = prepare_server_args(["--model-path", "dummy", "--device", "cpu", "--config", KEY_FILE])
server_args.resolve_once()
logged = engine._server_args_for_logging(server_args)
no_keys = prepare_server_args(["--model-path", "dummy", "--device", "cpu"])
no_keys.resolve_once()
without = engine._server_args_for_logging(no_keys)
print(
    json.dumps(
        {
            "module": engine.__file__,
            "api_key": server_args.api_key,  # what the server itself uses: must stay the real key
            "admin_api_key": server_args.admin_api_key,
            "logged": {k: logged[k] for k in ("api_key", "admin_api_key", "model_path")},
            "line": f"server_args={logged}",  # the startup log line, as engine.py formats it
            "logged_without_keys": {k: without[k] for k in ("api_key", "admin_api_key")},
        }
    )
)
