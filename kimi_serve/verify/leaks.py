"""Does the server hand its API keys to API clients? SGLang 0.5.23's ``/server_info`` (and the deprecated
``/get_server_info``) returns ``api_key``, ``admin_api_key`` and a ``launch_command`` built after ``--config`` is
merged, so holding the normal key is enough to learn the admin key. Patch 0007 of kimi-serve's set redacts them.

A finding here is a least-privilege FAIL (``server_info_leaks_key``, exit 1): any client can become admin. The key
itself never appears in a message.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kimi_serve.core.findings import FAIL, Finding
from kimi_serve.core.pin import PATCH_SET, patch_set_args, patches_apply
from kimi_serve.verify.discovery import fetch_json
from kimi_serve.verify.report import verdict
from kimi_serve.verify.target import Target

REDACTED = "<redacted>"
_KEY_FLAG = re.compile(r"--(admin-)?api-key(?:=|\s+)(\S+)")
FIX = (
    f"apply kimi-serve's patch set to the engine ({patches_apply(patch_set_args(PATCH_SET))}; its patch 0007 redacts "
    "/server_info and /get_server_info), then restart; or block both routes in front of the server"
)


def leaked_fields(info: Any, sent_key: str | None) -> list[str]:
    """The names of what in a /server_info body gives a key away (never the values)."""
    if not isinstance(info, dict):
        return []
    found = [name for name in ("api_key", "admin_api_key") if info.get(name) not in (None, "", REDACTED)]
    command = info.get("launch_command")
    if isinstance(command, str) and any(m.group(2) != REDACTED for m in _KEY_FLAG.finditer(command)):
        found.append("launch_command")
    if sent_key and sent_key in json.dumps(info, default=str) and not found:
        found.append("another field")
    return found


INFO_PATHS = ("/server_info", "/get_server_info")


def server_info_leaks(target: Target, deadline: float, api_key: str | None) -> list[Finding]:
    """A ``server_info_leaks_key`` FAIL when /server_info or /get_server_info returns a key to a client holding
    ``api_key``; nothing when they redact it, or answer anything but a JSON 200 (not SGLang, or blocked)."""
    leaking: list[str] = []
    fields: list[str] = []
    for path in INFO_PATHS:
        found = leaked_fields(fetch_json(target, path, deadline, api_key), api_key)
        if found:
            leaking.append(path)
            fields += [f for f in found if f not in fields]
    if not leaking:
        return []
    return [
        verdict(
            "server_info_leaks_key",
            FAIL,
            f"GET {' and '.join(leaking)} return(s) the API key(s) to any client holding the normal key "
            f"({', '.join(fields)} not redacted): every client can learn the admin key",
            FIX,
        )
    ]
