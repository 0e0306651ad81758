"""`doctor`'s ``unit.cuda``: a CUDA init and a GPU-to-GPU copy as the unit's user inside the unit's own sandbox, run as
a transient unit (``systemd-run`` with the unit's hardening lines, device policy and environment). File permissions
(``unit.reach``) cannot show that ``DevicePolicy=closed`` hides a node CUDA opens, or that ``/dev/nvidia-uvm`` cannot
be made under ``NoNewPrivileges=``; this does. The runner is the doctor host's (real: root and systemd).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

from kimi_serve.core.findings import FAIL, PASS, SKIP, Finding
from kimi_serve.core.proc import Completed, python_argv
from kimi_serve.host.gpus import doctor_finding

PROBE_UNIT = "kimi-serve-doctor-cuda"
PROBE_TIMEOUT_S = 180  # torch import + CUDA init of every GPU + one copy; the transient unit is stopped after it

# Standard library + torch only; prints one JSON object whatever happens.
PROBE = """\
import json, sys
out = {"cuda": False, "devices": 0, "copy": "skipped"}
try:
    import torch
    out["devices"] = torch.cuda.device_count()
    torch.cuda.init()
    torch.zeros(1, device="cuda:0")
    out["cuda"] = True
    if out["devices"] >= 2:
        a = torch.arange(1 << 20, dtype=torch.float32, device="cuda:0")
        b = a.to("cuda:1")
        torch.cuda.synchronize("cuda:1")
        out["peer"] = bool(torch.cuda.can_device_access_peer(0, 1))
        out["copy"] = "ok" if torch.equal(b.to("cuda:0"), a) else "mismatch"
except Exception as exc:
    out["error"] = (type(exc).__name__ + ": " + str(exc)).splitlines()[0][:300]
print(json.dumps(out))
"""


def probe_argv(
    python: str,
    user: str,
    sandbox: Iterable[tuple[str, str]],
    env: Mapping[str, str],
    extra: Sequence[tuple[str, str]] = (),
) -> list[str]:
    """The ``systemd-run`` command line: a transient service as ``user`` with the unit's ``sandbox`` lines (and
    ``extra`` unit lines: its CacheDirectory=, limits), its environment, waiting for the probe's answer on the pipe."""
    argv = [
        "systemd-run",
        f"--unit={PROBE_UNIT}",
        "--wait",
        "--pipe",
        "--collect",
        "--quiet",
        "--service-type=exec",
        f"--property=RuntimeMaxSec={PROBE_TIMEOUT_S}",
        f"--uid={user}",
    ]
    argv += [f"--property={key}={value}" for key, value in [*sandbox, *extra]]
    argv += [f"--setenv={key}={value}" for key, value in sorted(env.items())]
    return [*argv, "--", *python_argv(python, "-c", PROBE)]


def parse_probe(res: Completed) -> dict[str, object] | None:
    """The probe's JSON answer (its last stdout line that is a JSON object), or None."""
    for line in reversed(res.out.strip().splitlines()):
        try:
            answer = json.loads(line)
        except ValueError:
            continue
        if isinstance(answer, dict):
            return answer
    return None


FIX = (
    "compare the unit's DeviceAllow= with doctor's devices line and make sure /dev/nvidia-uvm exists (nvidia_uvm); "
    "to confirm the sandbox is the cause, set service.hardening: relaxed and run doctor again"
)


def probe_finding(res: Completed | None, gpus: int) -> Finding:
    """``unit.cuda`` from the probe's run (None: systemd-run is not installed)."""
    if res is None:
        return doctor_finding(
            "unit.cuda", SKIP, "systemd-run is not installed: CUDA inside the unit's sandbox not tried"
        )
    answer = parse_probe(res)
    if answer is None:
        return doctor_finding("unit.cuda", FAIL, f"the sandboxed CUDA probe gave no answer: {res.describe()}", FIX)
    error = str(answer.get("error") or "")
    if not answer.get("cuda"):
        return doctor_finding("unit.cuda", FAIL, f"CUDA does not initialise inside the unit's sandbox: {error}", FIX)
    devices = answer.get("devices")
    if isinstance(devices, int) and devices < gpus:
        message = f"inside the unit's sandbox CUDA sees {devices} GPU(s), the profile needs {gpus}"
        return doctor_finding("unit.cuda", FAIL, message, FIX)
    if gpus >= 2 and answer.get("copy") != "ok":
        what = error or f"copy {answer.get('copy')}"
        return doctor_finding("unit.cuda", FAIL, f"a GPU0->GPU1 copy inside the unit's sandbox failed: {what}", FIX)
    peer = {"True": ", peer access on", "False": ", peer access off"}.get(str(answer.get("peer")), "")
    copy = " and a GPU0->GPU1 copy" if answer.get("copy") == "ok" else ""
    return doctor_finding("unit.cuda", PASS, f"CUDA init{copy} work inside the unit's sandbox ({devices} GPU(s){peer})")
