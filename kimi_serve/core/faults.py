"""TEST HOOK: named checkpoints in the code that changes the host, where a test can kill or break kimi-serve.

Every step that changes the host (a backup, the journal, each file swapped in, each systemctl call) first calls
:func:`checkpoint`: a no-op unless ``$KIMI_SERVE_TEST_HOOK`` is set (never in production; docs/exit-codes.md). Its
comma-separated parts: ``kill-at=N`` (SIGKILL at the Nth checkpoint; the crash tests iterate N over a command's
checkpoints) or ``kill-at=NAME``; ``raise-at=NAME`` (an unexpected exception: exit 70); ``pause-at=NAME:SECONDS``
(overlapping runs, for the lock tests); ``trace-to=FILE`` (each checkpoint's name appended). Read at each checkpoint,
so a test's change of the environment takes effect at once.
"""

from __future__ import annotations

import os
import signal
import time

from kimi_serve.core.settings import current

_count = 0


class InjectedFault(RuntimeError):
    """The unexpected exception ``raise-at=NAME`` raises (deliberately not a KimiServeError: it is a 'bug')."""


def checkpoint(name: str) -> None:
    """A step boundary named ``name`` (e.g. ``patches.swap``); see the module doc for what a test can do here."""
    spec = current().test_hook
    if not spec:
        return
    global _count
    _count += 1
    for part in spec.split(","):
        kind, _, arg = part.strip().partition("=")
        if kind == "trace-to":
            with open(arg, "a", encoding="utf-8") as f:
                f.write(f"{_count} {name}\n")
        elif kind == "kill-at" and (arg == name or (arg.isdigit() and int(arg) == _count)):
            os.kill(os.getpid(), signal.SIGKILL)
        elif kind == "raise-at" and arg == name:
            raise InjectedFault(f"fault injected at checkpoint {name} by the test hook")
        elif kind == "pause-at" and arg.rpartition(":")[0] == name:
            time.sleep(float(arg.rpartition(":")[2]))
