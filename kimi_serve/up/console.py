"""What `kimi-serve up` shows: the server's own lines, phase lines, and on a terminal a live progress line.

tqdm fragments (weights n/N, CUDA-graph bars) are not echoed (they are in the log file verbatim); they become one
progress line rewritten in place on a terminal, or a plain line at most every ``PLAIN_EVERY_S`` seconds otherwise.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from kimi_serve.up.startup_log import Event, is_progress_bar

PLAIN_EVERY_S = 10.0
PREFIX = "kimi-serve up: "


class Console:
    def __init__(self, out: TextIO | None = None, err: TextIO | None = None, tty: bool | None = None,
                 echo_server: bool = True) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.tty = self.out.isatty() if tty is None else tty
        self.echo_server = echo_server
        self._status = False
        self._last_plain = 0.0

    def _clear(self) -> None:
        if self._status:
            self.out.write("\r\x1b[K")
            self._status = False

    def _line(self, text: str, stream: TextIO | None = None) -> None:
        self._clear()
        target = stream or self.out
        target.write(text + "\n")
        target.flush()

    def server_line(self, text: str) -> None:
        if self.echo_server and not is_progress_bar(text):
            self._line(text)

    def info(self, text: str) -> None:
        self._line(PREFIX + text)

    def problem(self, text: str) -> None:
        self.out.flush()
        self._line(PREFIX + text, self.err)

    def event(self, ev: Event) -> None:
        if ev.kind in ("shards", "graphs"):
            self._progress(ev)
        elif ev.kind == "phase":
            self.info(f"[{ev.phase}] {ev.text}")
        elif ev.kind != "failure":  # failures are reported with their log lines by the caller
            self.info(ev.text)

    def _progress(self, ev: Event) -> None:
        text = PREFIX + ev.text
        if self.tty:
            self._clear()
            self.out.write(text)
            self.out.flush()
            self._status = True
            return
        now = time.monotonic()
        if ev.done == ev.total or now - self._last_plain >= PLAIN_EVERY_S:
            self._last_plain = now
            self._line(text)
