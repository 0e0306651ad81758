"""Where the pods may run and what they may size: ``kubernetes.shm_size`` checked against Kubernetes' quantity
grammar, ``kubernetes.tolerations`` and ``kubernetes.node_selector`` checked against its label grammar, each refused
with the profile's file, key and fix (exit 2)."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.inputs import short_repr
from kimi_serve.k8s.view import K8sPlan

_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_PREFIX_MAX = 253  # a label key's DNS-subdomain prefix
# Kubernetes' quantity: a signed decimal number, then a binary-SI or decimal-SI suffix or a decimal exponent.
_QUANTITY = re.compile(r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$")
_SCALE = {f"{p}i": Decimal(2) ** (10 * (i + 1)) for i, p in enumerate("KMGTPE")}
_SCALE |= {p: Decimal(10) ** (3 * (i + 1)) for i, p in enumerate("kMGTPE")} | {"m": Decimal("0.001")}
_INT64_MAX = 2**63 - 1

Obj = dict[str, Any]


def _label_key(key: str) -> bool:
    prefix, _, _ = key.rpartition("/")
    return bool(_LABEL_KEY.match(key)) and len(prefix) <= _PREFIX_MAX


def shm_size(plan: K8sPlan) -> str:
    """``kubernetes.shm_size``, checked against Kubernetes' quantity grammar: a positive size that fits int64."""
    value = plan.profile.kubernetes.shm_size
    match = _QUANTITY.match(value)
    suffix = (match.group(1) or "") if match else ""
    size = Decimal(value[: len(value) - len(suffix)] or "0") if match else Decimal(0)
    if match and suffix[1:].lstrip("+-").isdigit():  # a decimal exponent, e.g. 129e6
        exponent = int(suffix[1:])
        size = size.scaleb(exponent) if abs(exponent) <= 100 else Decimal(_INT64_MAX + 1)
    elif match:
        size *= _SCALE.get(suffix, Decimal(1))
    if not match or size < 1 or size > _INT64_MAX:
        raise KimiServeError(
            f"kubernetes.shm_size {short_repr(value)} is not a Kubernetes quantity from one byte to 8Ei",
            where=plan.profile.where("kubernetes.shm_size"),
            hint="write a size such as 64Gi or 32G (NUMBER then Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P or E)",
        )
    return value


def tolerations(plan: K8sPlan) -> list[Obj]:
    """``kubernetes.tolerations`` (``KEY[=VALUE]:EFFECT``) as Toleration objects: a KEY alone tolerates the taint
    whatever its value (``Exists``), ``KEY=VALUE`` only that value (``Equal``)."""
    out = []
    for item in plan.profile.kubernetes.tolerations:
        taint, _, effect = item.rpartition(":")
        key, eq, value = taint.partition("=")
        problem = (
            "is not KEY[=VALUE]:EFFECT"
            if not key or effect not in _EFFECTS
            else f"has the key {short_repr(key)}, which is not a label key"
            if not _label_key(key)
            else f"has the value {short_repr(value)}, which is not a label value"
            if not _LABEL_VALUE.match(value)
            else None
        )
        if problem:
            raise KimiServeError(
                f"kubernetes.tolerations entry {short_repr(item)} {problem}",
                where=plan.profile.where("kubernetes.tolerations"),
                hint=f"write each as kubectl taint does (KEY: [PREFIX/]NAME of letters, digits and -_., at most 63; "
                f"VALUE the same or none), EFFECT one of {', '.join(_EFFECTS)}",
            )
        tol: Obj = {"key": key, "operator": "Equal" if eq else "Exists", "effect": effect}
        if eq:
            tol["value"] = value
        out.append(tol)
    return out


def node_selector(plan: K8sPlan) -> dict[str, str]:
    """``kubernetes.node_selector`` (``LABEL=VALUE``) as a nodeSelector."""
    out = {}
    for item in plan.profile.kubernetes.node_selector:
        key, eq, value = item.partition("=")
        if not eq or not _label_key(key) or not _LABEL_VALUE.match(value):
            raise KimiServeError(
                f"kubernetes.node_selector entry {short_repr(item)} is not LABEL=VALUE",
                where=plan.profile.where("kubernetes.node_selector"),
                hint="write each as a node label, e.g. nvidia.com/gpu.product=NVIDIA-RTX-PRO-6000",
            )
        out[key] = value
    return out
