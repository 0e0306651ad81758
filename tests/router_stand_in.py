"""A STAND-IN for sglang-router 0.3.2's worker API (GET/DELETE/POST /workers in its shape), for the rolling restart's
tests: it records every change to its rotation and the fewest healthy workers it ever had. The real router with the
real systemd: tests/systemd/test_fleet_systemd.py.

It can misbehave as a slow or broken router would: apply an accepted removal ``late`` seconds after answering 202;
answer ``GET /workers`` with JSON nested too deeply to parse for the next ``deep_after_removal`` requests after a
removal (-1: until the next ``POST``); answer HTTP 500 to the next ``fail[METHOD]`` requests of a method; hold the next
``hang[METHOD]`` answers ``hang_s`` seconds (past the client's timeout).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class StandInRouter:
    """STAND-IN for sglang-router's worker API; ``healthy`` says which worker URLs answer their health checks."""

    def __init__(self) -> None:
        self.workers: dict[str, str] = {}  # id -> url
        self.healthy: set[str] = set()
        self.log: list[str] = []
        self.min_healthy: int | None = None
        self.late = 0.0
        self.deep = 0
        self.fail: dict[str, int] = {}
        self.hang: dict[str, int] = {}
        self.hang_s = 8.0
        self.requests: list[str] = []
        router = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, code: int, data: dict[str, Any]) -> None:
                body = json.dumps(data).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _misbehaves(self, method: str) -> bool:
                """The scripted misbehaviour of this request, if any (then it is answered)."""
                router.requests.append(method)
                if router.hang.get(method, 0) > 0:
                    router.hang[method] -= 1
                    time.sleep(router.hang_s)
                if router.fail.get(method, 0) > 0:
                    router.fail[method] -= 1
                    self._send(500, {"error": "internal"})
                    return True
                if method == "GET" and router.deep:
                    router.deep -= 1 if router.deep > 0 else 0
                    body = b"[" * 100_000 + b"]" * 100_000
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return True
                return False

            def do_GET(self) -> None:
                if self._misbehaves("GET"):
                    return
                self._send(
                    200,
                    {
                        "workers": [
                            {"id": i, "url": u, "is_healthy": u in router.healthy} for i, u in router.workers.items()
                        ]
                    },
                )

            def do_DELETE(self) -> None:
                if self._misbehaves("DELETE"):
                    return
                worker = self.path.rsplit("/", 1)[-1]
                if router.late:
                    threading.Timer(router.late, router.remove, (worker,)).start()
                else:
                    router.remove(worker)
                self._send(202, {"status": "accepted"})

            def do_POST(self) -> None:
                url = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["url"]
                if self._misbehaves("POST"):
                    return
                router.deep = 0 if router.deep < 0 else router.deep
                router.workers[str(uuid.uuid4())] = url
                router.changed(f"add {url}")
                self._send(202, {"status": "accepted"})

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])

    def remove(self, worker: str) -> None:
        url = self.workers.pop(worker, None)
        if url is not None:
            self.changed(f"remove {url}")
            self.deep = self.deep_after_removal

    deep_after_removal = 0  # GETs answered with deep JSON after each removal (-1: until the next POST)

    def changed(self, what: str) -> None:
        self.log.append(what)
        n = sum(1 for u in self.workers.values() if u in self.healthy)
        self.min_healthy = n if self.min_healthy is None else min(self.min_healthy, n)


@contextlib.contextmanager
def serving() -> Iterator[StandInRouter]:
    """A stand-in router on a loopback port, served from a thread for the block."""
    r = StandInRouter()
    threading.Thread(target=r.server.serve_forever, daemon=True).start()
    try:
        yield r
    finally:
        r.server.shutdown()
        r.server.server_close()
