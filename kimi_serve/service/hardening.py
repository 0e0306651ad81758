"""The unit's systemd sandbox (``service.hardening``: strict | relaxed | off) and the writable cache directories that
CUDA, Triton, FlashInfer, torch and Hugging Face JIT-compile into under it. docs/systemd.md explains every option,
what it protects, and why each option systemd-analyze would also like is left out.

The sandbox must leave a GPU server working: the NVIDIA device nodes (``DeviceAllow=``), /dev/shm for NCCL's and
torch's shared memory (``ProtectSystem=strict`` leaves /dev writable), netlink for NCCL's interface discovery, W+X
memory for the JITs (no ``MemoryDenyWriteExecute=``), pidfd_getfd for CUDA/torch IPC of memory handles (torch
symmetric memory, expandable segments), the device groups (no ``PrivateUsers=``).
"""

from __future__ import annotations

from collections.abc import Iterable

from kimi_serve.host.gpu_host import UNIT_DEVICE_GROUPS
from kimi_serve.host.unit_reach import HOME_TREES
from kimi_serve.sglang.toolchain import cache_env

CACHE_NAME = "kimi-serve"  # CacheDirectory=: /var/cache/kimi-serve, created and owned by systemd for User=
CACHE_ROOT = f"/var/cache/{CACHE_NAME}"
_HOME_TREES = tuple(f"{tree}/" for tree in HOME_TREES)  # what ProtectHome= hides

# NVIDIA's character devices by /proc/devices group: nvidia0..N + nvidiactl + nvidia-modeset (the frontend, which some
# drivers register as "nvidia-frontend" and others as "nvidia": both are listed), the unified memory driver, and the
# capability nodes (MIG, fabric). doctor's devices line compares them with what the driver registers.
GPU_DEVICES = tuple(f"char-{group} rw" for group in UNIT_DEVICE_GROUPS)

# torch and CUDA fetch memory-handle fds from peer ranks with pidfd_getfd (in @debug); everything else a GPU server
# calls is in @system-service.
SYSCALLS = "@system-service pidfd_getfd"


def cache_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` with every JIT cache (:data:`kimi_serve.sglang.toolchain.CACHE_ENV`) pointed into the unit's
    CacheDirectory (values the profile sets win)."""
    return {**env, **{k: v for k, v in cache_env(CACHE_ROOT).items() if k not in env}}


def protect_home(paths: Iterable[str]) -> str:
    """``yes`` (no /home, /root, /run/user) unless the server runs or reads something there: then ``read-only``."""
    return "read-only" if any(p.startswith(_HOME_TREES) for p in paths if p) else "yes"


def sandbox(level: str, writable: Iterable[str], home: str) -> list[tuple[str, str]]:
    """``(setting, value)`` lines of the sandbox at ``level``; ``writable``: directories the service writes besides
    its State/Cache directories (e.g. its working directory) as ReadWritePaths= words, already quoted and escaped
    (``"-/var/lib/x"``: the ``-`` ignores a missing one), ``home``: the ProtectHome= value."""
    if level == "off":
        return []
    lines = [
        ("NoNewPrivileges", "yes"),
        ("CapabilityBoundingSet", ""),
        ("AmbientCapabilities", ""),
        ("ProtectSystem", "strict" if level == "strict" else "full"),
        *[("ReadWritePaths", word) for word in writable],
        ("ProtectHome", home),
        ("PrivateTmp", "yes"),
        ("PrivateMounts", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectKernelLogs", "yes"),
        ("ProtectControlGroups", "yes"),
        ("ProtectHostname", "yes"),
        ("RestrictSUIDSGID", "yes"),
        ("RestrictRealtime", "yes"),
        ("LockPersonality", "yes"),
        ("RemoveIPC", "yes"),
        ("UMask", "0077"),
    ]
    if level == "strict":
        lines += [
            ("ProtectKernelTunables", "yes"),
            ("ProtectClock", "yes"),  # implies DeviceAllow=char-rtc r: a device ACL, so strict-only
            ("ProtectProc", "invisible"),
            ("DevicePolicy", "closed"),
            *[("DeviceAllow", device) for device in GPU_DEVICES],
            ("RestrictNamespaces", "yes"),
            ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6 AF_NETLINK"),
            ("SystemCallArchitectures", "native"),
            ("SystemCallFilter", SYSCALLS),
            ("SystemCallErrorNumber", "EPERM"),
        ]
    return lines


# The monitoring units (the verify oneshot, the alert template) are HTTP clients: no devices, no netlink, no JIT, no
# capabilities; the verify oneshot writes only its records' and the metrics file's directories (ReadWritePaths=).
CLIENT_FAMILIES = "AF_UNIX AF_INET AF_INET6"


def client_sandbox(writable: Iterable[str]) -> list[tuple[str, str]]:
    """``(setting, value)`` lines of a monitoring unit's sandbox; ``writable``: its ReadWritePaths= words, already
    quoted and escaped. Root without capabilities can still write root-owned files, but no other user's."""
    return [
        ("NoNewPrivileges", "yes"),
        ("CapabilityBoundingSet", ""),
        ("AmbientCapabilities", ""),
        ("ProtectSystem", "strict"),
        *[("ReadWritePaths", word) for word in writable],
        ("ProtectHome", "read-only"),  # kimi-serve's interpreter may live under /root (pyenv, a venv)
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("PrivateIPC", "yes"),
        ("PrivateMounts", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectKernelLogs", "yes"),
        ("ProtectControlGroups", "yes"),
        ("ProtectClock", "yes"),
        ("ProtectHostname", "yes"),
        ("ProtectProc", "invisible"),
        ("ProcSubset", "pid"),
        ("RestrictSUIDSGID", "yes"),
        ("RestrictRealtime", "yes"),
        ("RestrictNamespaces", "yes"),
        ("LockPersonality", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("RemoveIPC", "yes"),
        ("KeyringMode", "private"),
        ("UMask", "0077"),
        ("RestrictAddressFamilies", CLIENT_FAMILIES),
        ("SystemCallArchitectures", "native"),
        ("SystemCallFilter", "@system-service"),
        ("SystemCallFilter", "~@privileged @resources"),
        ("SystemCallErrorNumber", "EPERM"),
    ]
