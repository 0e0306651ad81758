"""Does the server hand its API keys to API clients? SGLang 0.5.23's ``/server_info`` (and the deprecated
``/get_server_info``) returns ``api_key``, ``admin_api_key`` and a ``launch_command`` built after ``--config`` is
merged, so holding the normal key is enough to learn the admin key. Patch 0007 of kimi-serve's set redacts them.

A finding here is a warning: the chat contract still holds. The key itself never appears in a message.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kimi_serve.core.findings import Finding
from kimi_serve.verify.report import warning
from kimi_serve.verify.target import Target
from kimi_serve.verify.transport import TransportError, request

REDACTED = "<redacted>"
_KEY_FLAG = re.compile(r"--(admin-)?api-key(?:=|\s+)(\S+)")
FIX = (
    "apply kimi-serve's patch set (kimi-serve patches apply; its patch 0007 redacts /server_info), or block "
    "/server_info and /get_server_info in front of the server"
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


def server_info_warnings(target: Target, deadline: float, api_key: str | None) -> list[Finding]:
    """A ``server_info_leaks_key`` warning when /server_info returns a key; nothing when it is redacted or absent."""
    try:
        reply = request("GET", target.url("/server_info"), deadline=deadline, api_key=api_key)
    except TransportError:
        return []
    if reply.status != 200 or reply.timed_out:
        return []  # not SGLang, or the route is blocked: nothing leaks here
    try:
        info = json.loads(reply.body)
    except ValueError:
        return []
    fields = leaked_fields(info, api_key)
    if not fields:
        return []
    return [
        warning(
            "server_info_leaks_key",
            f"GET /server_info returns the API key(s) to any client holding the "
            f"normal key ({', '.join(fields)} not redacted; /get_server_info returns the same)",
            FIX,
        )
    ]
