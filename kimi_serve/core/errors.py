"""The one user-facing error type and the documented exit codes (docs/exit-codes.md)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # a check failed or the API contract is violated
    USAGE = 2  # invalid input: bad profile, bad flag, bad argument
    UNREACHABLE = 3  # server unreachable or never became ready
    SERVER_EXITED = 4  # the server process exited or crashed during start or supervision
    ENVIRONMENT = 5  # the host cannot do it (missing tool, sglang not installed, not root, ...)
    INTERNAL = 70  # a bug in kimi-serve itself (EX_SOFTWARE): never read as "the server is broken"
    LOCKED = 75  # another kimi-serve command holds what this one takes (EX_TEMPFAIL): try again (or --wait-lock)
    INTERRUPTED = 130


class KimiServeError(Exception):
    """An error meant for a user: one line saying what is wrong, where, and how to fix it.

    ``where`` is a breadcrumb such as ``configs/prod.yaml: server.port``; ``hint`` says the fix.
    """

    def __init__(
        self,
        message: str,
        *,
        where: str | None = None,
        hint: str | None = None,
        exit_code: ExitCode = ExitCode.USAGE,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.where = where
        self.hint = hint
        self.exit_code = exit_code

    def one_line(self) -> str:
        where = f"{self.where}: " if self.where else ""
        fix = f" (fix: {self.hint})" if self.hint else ""
        return f"{where}{self.message}{fix}".replace("\n", " ")


WAIT_OPTION = "--wait-lock"  # the option of the commands that can wait for a lock's holder instead of exiting 75


def wait_hint(can_wait: bool) -> str:
    """The fix of a :class:`LockHeld` for a command with (``can_wait``) or without the :data:`WAIT_OPTION`."""
    return f"wait for it to finish, or pass {WAIT_OPTION}" if can_wait else "wait for it to finish, then run it again"


class LockHeld(KimiServeError):
    """Exit 75: another process holds a lock this command takes (kimi_serve.core.lock). Its fix names
    :data:`WAIT_OPTION` only to a command that has it: the CLI's boundary sets it from the running command's own
    options (:func:`wait_hint`)."""

    def __init__(self, message: str, *, where: str) -> None:
        super().__init__(message, where=where, hint=wait_hint(False), exit_code=ExitCode.LOCKED)
