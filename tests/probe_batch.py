"""Run several probe scripts against one copy of the sglang package, paying its import once.

``python probe_batch.py SITE_DIR PROBE ARG [PROBE ARG ...]`` (the CPU SGLang interpreter): SITE_DIR goes first on
sys.path and the modules every probe starts from (torch, SGLang's server args and HTTP server) are imported once;
then each probe runs in a forked child as if started alone (``PROBE SITE_DIR ARG``, as ``__main__``), so no probe
sees another's state. Prints one JSON object: each probe's file name -> its last stdout line parsed, or its failure
(``{"error": ..., "stderr": ...}``). tests/test_patches_sglang.py checks that a batch answers as cold runs do.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import tempfile
from pathlib import Path

SITE = sys.argv[1]
sys.path.insert(0, SITE)

import sglang.srt.entrypoints.http_server  # noqa: E402 - the shared imports, paid once
import sglang.srt.server_args  # noqa: E402, F401
import torch  # noqa: E402, F401


def run_one(probe: str, arg: str) -> dict:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:  # the child: the probe as its own __main__, its output to the files
            code = 0
            try:
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                sys.argv = [probe, SITE, arg]
                runpy.run_path(probe, run_name="__main__")
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:  # noqa: BLE001 - reported through the exit code and stderr
                import traceback

                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    code = os.waitstatus_to_exitcode(status)
    lines = stdout.strip().splitlines()
    if code != 0 or not lines:
        return {"error": f"exit {code}", "stderr": stderr[-3000:]}
    return json.loads(lines[-1])


pairs = sys.argv[2:]
print(json.dumps({Path(pairs[i]).name: run_one(pairs[i], pairs[i + 1]) for i in range(0, len(pairs), 2)}))
