"""STAND-IN for a broken layer in front of SGLang, for the raw-path tests: a loopback HTTP proxy that forwards every
request to a real upstream (the simulator) and alters one thing on the way back, the way a misbehaving parser, engine
or gateway would. Not SGLang; each ``mode`` names the fault it plays:

- ``strip-special``: ``/generate`` text decoded with special tokens removed although ``skip_special_tokens`` was false
  (the ids still carry them), as an engine that ignores the flag does;
- ``compact-arguments``: chat ``tool_calls`` arguments re-serialized as compact JSON (whitespace dropped), as a parser
  that does ``json.dumps(json.loads(args))`` does;
- ``strip-reasoning``: chat ``reasoning_content`` stripped of its last character (a lost fragment);
- ``perturb-generate``: one ``/generate`` output id changed (a server that is not deterministic).
"""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler
from typing import Any

from contract_server import BackloggedServer

MODES = ("strip-special", "compact-arguments", "strip-reasoning", "perturb-generate")
_SPECIAL = re.compile(r"<\|[a-z_]+\|>|</?think>")


def _alter(mode: str, path: str, data: Any) -> Any:
    if not isinstance(data, dict):
        return data
    if path == "/generate" and mode == "strip-special" and isinstance(data.get("text"), str):
        data["text"] = _SPECIAL.sub("", data["text"])
    if path == "/generate" and mode == "perturb-generate" and data.get("output_ids"):
        data["output_ids"][1] += 1
    if path == "/v1/chat/completions":
        for choice in data.get("choices") or []:
            message = choice.get("message") or {}
            if mode == "compact-arguments":
                for call in message.get("tool_calls") or []:
                    call["function"]["arguments"] = json.dumps(
                        json.loads(call["function"]["arguments"]), separators=(",", ":")
                    )
            if mode == "strip-reasoning" and message.get("reasoning_content"):
                message["reasoning_content"] = message["reasoning_content"][:-1]
    return data


class RawProxy:
    def __init__(self, upstream: str, mode: str) -> None:
        assert mode in MODES, mode
        self.upstream, self.mode = upstream, mode
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self, method: str) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")}
                req = urllib.request.Request(proxy.upstream + self.path, data=body, method=method, headers=headers)
                try:
                    with urllib.request.urlopen(req, timeout=60) as resp:
                        status, ctype, payload = resp.status, resp.headers.get("content-type", ""), resp.read()
                except urllib.error.HTTPError as exc:
                    status, ctype, payload = exc.code, exc.headers.get("content-type", ""), exc.read()
                if "json" in ctype and status == 200:
                    payload = json.dumps(_alter(proxy.mode, self.path, json.loads(payload))).encode()
                self.send_response(status)
                if ctype:
                    self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                self._forward("GET")

            def do_POST(self) -> None:
                self._forward("POST")

        self.server = BackloggedServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> RawProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
