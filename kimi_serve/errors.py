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
    BUSY = 75  # EX_TEMPFAIL: another run holds a host-wide lock (engine install); try again later
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
        parts = []
        if self.where:
            parts.append(f"{self.where}: ")
        parts.append(self.message)
        if self.hint:
            parts.append(f" (fix: {self.hint})")
        return "".join(parts).replace("\n", " ")
