"""What `kimi-serve up` shows: the server's own lines, phase lines, and on a terminal a live status line (rich,
imported only then) refreshed every second by :meth:`Console.tick`; elsewhere a plain status line every
``PLAIN_EVERY_S``. tqdm fragments and known warnings that say nothing about the server are not echoed (the log file
keeps them). A terminal that goes away (EIO, EPIPE) does not stop `up` from stopping its servers in order: the stream
that failed (and every standard stream on the same file) is pointed at /dev/null.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from kimi_serve.process.startup_log import PHASE_TITLES, Event, KnownNoise, Progress, is_progress_bar

PLAIN_EVERY_S = 10.0
TTY_EVERY_S = 1.0
PREFIX = "kimi-serve up: "


def _clock(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def status_text(progress: Progress, elapsed: float, deadline: float) -> str:
    """One line: phase, elapsed, weight loading (or CUDA graphs) as n/N and %, and the deadline."""
    parts = [PHASE_TITLES.get(progress.phase, progress.phase), f"{_clock(elapsed)} elapsed"]
    if progress.shards_total:
        pct = 100 * progress.shards_done // progress.shards_total
        parts.append(f"weights {pct}% ({progress.shards_done}/{progress.shards_total} shards)")
    if progress.graphs_total:
        parts.append(f"CUDA graphs {progress.graphs_done}/{progress.graphs_total}")
    parts.append(f"deadline {_clock(deadline)} ({_clock(deadline - elapsed)} left)")
    return " | ".join(parts)


class Console:
    def __init__(
        self, out: TextIO | None = None, err: TextIO | None = None, tty: bool | None = None, echo_server: bool = True
    ) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.tty = self.out.isatty() if tty is None else tty
        self.echo_server = echo_server
        self._live: Any = None  # rich.live.Live while a start is in progress on a terminal
        self._last_tick = 0.0
        self._last_plain = 0.0
        self._noise = KnownNoise()  # this stream's known warnings (the log file keeps them)

    # -- the live status line (terminal only)
    def _start_live(self) -> Any:
        if self._live is None:
            from rich.console import Console as RichConsole
            from rich.live import Live

            self._live = Live(
                console=RichConsole(file=self.out, force_terminal=True),
                auto_refresh=False,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()
        return self._live

    def end_progress(self) -> None:
        """Remove the live line (ready, failed, or stopping)."""
        if self._live is not None:
            live, self._live = self._live, None
            try:
                live.stop()
            except OSError:
                self._lost(self.out)

    def tick(self, progress: Progress, elapsed: float, deadline: float) -> None:
        """Called by the watch loop while the server starts (often); redraws at most every second on a terminal,
        writes a plain status line every ``PLAIN_EVERY_S`` elsewhere."""
        self.show(lambda: PREFIX + status_text(progress, elapsed, deadline))

    def show(self, text: Callable[[], str]) -> None:
        """The live status line: redrawn at most every second on a terminal, a plain line every ``PLAIN_EVERY_S``
        elsewhere (``text`` is only called when something is drawn)."""
        now = time.monotonic()
        if self.tty:
            if now - self._last_tick >= TTY_EVERY_S:
                self._last_tick = now
                from rich.text import Text

                line = Text(text(), no_wrap=True, overflow="ellipsis")
                try:
                    self._start_live().update(line, refresh=True)
                except OSError:
                    self._lost(self.out)
        elif now - self._last_plain >= PLAIN_EVERY_S:
            self._last_plain = now
            self._line(text())

    # -- lines
    def _line(self, text: str, stream: TextIO | None = None) -> None:
        target = stream or self.out
        try:
            if self._live is not None and target is self.out:
                self._live.console.print(text, markup=False, highlight=False, emoji=False, soft_wrap=True)
                self._live.refresh()
                return
            if self._live is not None:
                self.out.flush()
            target.write(text + "\n")
            target.flush()
        except OSError:
            self._lost(target)

    def _lost(self, stream: TextIO) -> None:
        """``stream`` cannot be written (its terminal is gone): point its file descriptor, and every standard
        stream's on the same file, at /dev/null, so later writes and the buffered rest succeed into nothing."""
        self.tty = False  # no live line on what is not a terminal any more
        self._live = None
        try:
            gone = os.fstat(stream.fileno())
        except (OSError, ValueError):  # not a file (a test's buffer): nothing to redirect
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            for other in {self.out, self.err, sys.stdout, sys.stderr}:
                with contextlib.suppress(OSError, ValueError, AttributeError):
                    st = os.fstat(other.fileno())
                    if (st.st_dev, st.st_ino) == (gone.st_dev, gone.st_ino):
                        os.dup2(devnull, other.fileno())
        finally:
            os.close(devnull)
        with contextlib.suppress(OSError, ValueError):
            stream.flush()  # what is still buffered goes to /dev/null now

    def server_line(self, text: str) -> None:
        if self.echo_server and not is_progress_bar(text) and not self._noise.drop(text):
            self._line(text)

    def info(self, text: str) -> None:
        self._line(PREFIX + text)

    def problem(self, text: str) -> None:
        try:
            self.out.flush()
        except OSError:
            self._lost(self.out)
        self._line(PREFIX + text, self.err)

    def event(self, ev: Event) -> None:
        if ev.kind in ("shards", "graphs"):
            self._progress(ev)
        elif ev.kind == "phase":
            self.info(f"[{ev.phase}] {ev.text}")
        elif ev.kind != "failure":  # failures are reported with their log lines by the caller
            self.info(ev.text)

    def _progress(self, ev: Event) -> None:
        if self.tty:  # the live line shows it (tick)
            return
        now = time.monotonic()
        if ev.done == ev.total or now - self._last_plain >= PLAIN_EVERY_S:
            self._last_plain = now
            self._line(PREFIX + ev.text)
