"""The installer an ``engine install`` runs (uv or pip), and its failures read from its output: a hash mismatch is
named with its packages, anything else by the output's last line; the previous venv is untouched either way."""

from __future__ import annotations

import re
import sys

from kimi_serve.core import proc
from kimi_serve.engine.interpreter import UNTOUCHED, env_error

_UV_MISMATCH = re.compile(r"Hash mismatch for `([^`]+)`")
_PIP_MISMATCH = re.compile(r"^\s+(\S+==\S+) from \S+", re.MULTILINE)


def hash_mismatch(output: str) -> list[str]:
    """The packages (``name==version``) uv's or pip's output reports a sha256 mismatch for."""
    found = _UV_MISMATCH.findall(output)
    if "DO NOT MATCH THE HASHES" in output:
        found += _PIP_MISMATCH.findall(output.split("DO NOT MATCH THE HASHES", 1)[1])
    return list(dict.fromkeys(found))


def run_installer(cmd: list[str], what: str, *, progress: bool, env: dict[str, str] | None = None) -> None:
    try:
        if progress:  # the long download: show uv/pip's output as it comes (stderr, so --json stays clean)
            streamed = proc.stream(cmd, sys.stderr.write, env=env)
            rc, output = streamed.rc, streamed.out
        else:
            done = proc.run(cmd, timeout=None, env=env, errors="replace")
            rc = done.rc
            output = done.err.strip() or done.out.strip()
    except (FileNotFoundError, proc.NotInstalled) as exc:
        raise env_error(f"{what}: {cmd[0]} not found", "install it, or pass --installer pip") from exc
    if rc != 0:
        mismatched = hash_mismatch(output)
        if mismatched:
            raise env_error(
                f"{what} failed: hash mismatch for {', '.join(mismatched[:5])}: the downloaded file's sha256 is not "
                f"the one the lock pins; nothing was installed and {UNTOUCHED}",
                "use the lock shipped with kimi-serve (--lock gpu|cpu) or regenerate it with scripts/lock.py; "
                "if the lock is right, the index served another file: check the index or mirror",
            )
        detail = f": {output.strip().splitlines()[-1].strip()}" if output.strip() else " (see the output above)"
        raise env_error(
            f"{what} failed (exit {rc}){detail}; {UNTOUCHED}",
            "check the lock and the network (PyPI), then run engine install again",
        )
