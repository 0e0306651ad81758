"""A STAND-IN for sglang-router 0.3.2's worker API (GET/DELETE/POST /workers in its shape), for the rolling restart's
tests: it records every change to its rotation and the fewest healthy workers it ever had. The real router with the
real systemd: tests/systemd/test_fleet_systemd.py.
"""

from __future__ import annotations

import contextlib
import json
import threading
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
        router = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, code: int, data: dict[str, Any]) -> None:
                body = json.dumps(data).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._send(
                    200,
                    {
                        "workers": [
                            {"id": i, "url": u, "is_healthy": u in router.healthy} for i, u in router.workers.items()
                        ]
                    },
                )

            def do_DELETE(self) -> None:
                url = router.workers.pop(self.path.rsplit("/", 1)[-1])
                router.changed(f"remove {url}")
                self._send(202, {"status": "accepted"})

            def do_POST(self) -> None:
                url = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["url"]
                router.workers[str(uuid.uuid4())] = url
                router.changed(f"add {url}")
                self._send(202, {"status": "accepted"})

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])

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
