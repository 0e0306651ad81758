"""The profile keys of how kimi-serve runs and watches the server: the start's deadline, the contract check, the
verify timer, the systemd unit and Kubernetes (one part of :data:`kimi_serve.profile.schema.SECTIONS`)."""

from __future__ import annotations

from kimi_serve.core.suites import MONITOR_SUITES, QUICK, SUITES
from kimi_serve.profile.key import Key

OPERATIONS: dict[str, dict[str, Key]] = {
    "startup": {
        "timeout": Key(
            "int",
            "Seconds a cold start may take (weights, CUDA graphs, warmup): up's deadline and "
            "the unit's TimeoutStartSec.",
            default=1800,
            min=10,
            max=14400,
        ),
    },
    "verify": {
        "suite": Key("str", "Contract suite run after start.", default=QUICK, choices=SUITES),
        "timeout": Key("float", "Seconds for the whole contract check.", default=120, min=1, max=3600),
    },
    "monitor": {
        "enabled": Key(
            "bool",
            "install-service also installs a timer that checks the contract every `interval` "
            "seconds (NAME-verify.service/.timer, docs/monitoring.md); false installs neither.",
            default=True,
        ),
        "interval": Key(
            "int",
            "Seconds between contract checks (the timer's OnUnitActiveSec).",
            default=300,
            min=5,
            max=86400,
        ),
        "randomized_delay": Key(
            "int",
            "Up to this many seconds added to each check (RandomizedDelaySec).",
            default=30,
            min=0,
            max=3600,
        ),
        "suite": Key(
            "str",
            "Suite each check runs (quick keeps it light on a serving box).",
            default=QUICK,
            choices=MONITOR_SUITES,
        ),
        "timeout": Key("float", "Seconds one check may take (all probes together).", default=60, min=5, max=600),
        "max_tokens": Key(
            "int",
            "Cap on each probe's max_tokens (the full suite's 8 KB argument probe needs 16384).",
            default=2048,
            min=256,
            max=16384,
        ),
        "metrics_file": Key(
            "path",
            "node_exporter textfile-collector file the checks write (null: "
            "/var/lib/prometheus/node-exporter/kimi-serve-UNIT.prom).",
        ),
    },
    "service": {
        "unit_name": Key("str", "systemd unit name (without .service).", default="sglang-kimi"),
        "user": Key(
            "str",
            "User the service runs as: a dedicated system user that install-service creates if absent "
            "(in the groups owning /dev/nvidia*, owning the key file and the state/cache directories, "
            "reading the model). root is allowed but not recommended.",
            default="kimi-serve",
        ),
        "hardening": Key(
            "str",
            "systemd sandboxing of the unit (docs/systemd.md): `strict` (exposure <= 5.0), "
            "`relaxed` (exposure 5.0: drops what a host may trip on: syscall filter, device policy, "
            "namespace and address-family limits) or `off` (quoted: YAML reads a bare off as "
            "false).",
            default="strict",
            choices=("strict", "relaxed", "off"),
        ),
        "working_directory": Key(
            "path",
            "Working directory (and home) of the service, owned by service.user: a directory of its own, never "
            "kimi-serve's state root (only /var/lib/kimi-serve/server inside it), a systemd unit directory, /etc, "
            "/usr, / or the model, nor one containing them (`check` and install-service refuse those).",
            default="/var/lib/kimi-serve/server",
        ),
        "stop_timeout": Key(
            "int",
            "Seconds SGLang gets to drain after SIGTERM before SIGKILL.",
            default=120,
            min=5,
            max=3600,
        ),
        "limit_nofile": Key(
            "int",
            "LimitNOFILE for the service (at most the kernel's fs.nr_open ceiling).",
            default=1_048_576,
            min=1024,
            max=2_147_483_584,
        ),
        "limit_memlock": Key("str", "LimitMEMLOCK for the service (NCCL pins memory).", default="infinity"),
    },
    "kubernetes": {
        "node_selector": Key(
            "str_list",
            "`render --format k8s` only: the server pods' nodeSelector, each LABEL=VALUE (e.g. "
            "nvidia.com/gpu.product=NAME), docs/kubernetes.md.",
            default=[],
        ),
        "tolerations": Key(
            "str_list",
            "`render --format k8s` only: taints the server pods tolerate, each KEY[=VALUE]:EFFECT as `kubectl taint` "
            "writes them (EFFECT NoSchedule, PreferNoSchedule or NoExecute).",
            default=[],
        ),
        "shm_size": Key(
            "str",
            "`render --format k8s` only: the size of the server pods' /dev/shm (a memory-backed emptyDir; NCCL and "
            "torch put their shared memory there), a Kubernetes quantity.",
            default="64Gi",
        ),
    },
}
