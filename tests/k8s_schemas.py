"""Offline schema validation of rendered Kubernetes manifests (docs/kubernetes.md "What was validated").

Core kinds: kubernetes-validate's bundled OpenAPI schemas of Kubernetes K8S_VERSION, strict (an unknown field fails,
where the API server would drop it). LeaderWorkerSet: :data:`LWS_SCHEMA`, kimi-serve's own JSON Schema of the
fields the renderer emits, written from the published LeaderWorkerSet API (``leaderworkerset.x-k8s.io/v1``), closed
at every level (``additionalProperties: false``: a typo or a field the renderer never emits fails), with jsonschema;
then each of its pod templates as a core Pod, strict. A field the renderer starts to emit must be added here, from
the API's documentation. PrometheusRule has no schema here: :func:`check_prometheus_rule` checks its shape by hand.
"""

from __future__ import annotations

from typing import Any

K8S_VERSION = "1.35.0"  # kubernetes-validate==1.35.0 (pyproject [test], requirements/dev.txt)
LWS_API = "leaderworkerset.x-k8s.io/v1"  # the LeaderWorkerSet API group and version LWS_SCHEMA describes

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"  # RFC 1123 label: object names, namespaces
_STRING_MAP: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}


def _closed(properties: dict[str, Any], required: tuple[str, ...] = (), description: str = "") -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    if description:
        schema["description"] = description
    return schema


_POD_TEMPLATE = _closed(
    {
        "metadata": _closed({"labels": _STRING_MAP, "annotations": _STRING_MAP}),
        "spec": {"type": "object", "description": "a core PodSpec: validated as a Pod by kubernetes-validate"},
    },
    required=("metadata", "spec"),
    description="a core PodTemplateSpec; its metadata and spec are also validated as a core Pod (check_lws)",
)

LWS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "LeaderWorkerSet (leaderworkerset.x-k8s.io/v1), the fields kimi-serve renders",
    **_closed(
        {
            "apiVersion": {"const": LWS_API},
            "kind": {"const": "LeaderWorkerSet"},
            "metadata": _closed(
                {
                    "name": {"type": "string", "pattern": _DNS_LABEL, "maxLength": 63},
                    "namespace": {"type": "string", "pattern": _DNS_LABEL, "maxLength": 63},
                    "labels": _STRING_MAP,
                    "annotations": _STRING_MAP,
                },
                required=("name", "namespace"),
            ),
            "spec": _closed(
                {
                    "replicas": {
                        "type": "integer",
                        "minimum": 0,
                        "maximum": 2**31 - 1,
                        "description": "how many groups (leader + workers) run; an int32, the API's default is 1",
                    },
                    "startupPolicy": {
                        "enum": ["LeaderCreated", "LeaderReady"],
                        "description": "when the workers of a group are created: once the leader pod exists "
                        "(LeaderCreated, the API's default), or only once it is ready (LeaderReady)",
                    },
                    "leaderWorkerTemplate": _closed(
                        {
                            "size": {
                                "type": "integer",
                                "minimum": 1,
                                "maximum": 2**31 - 1,
                                "description": "pods per group, the leader included (an int32, at least 1)",
                            },
                            "restartPolicy": {
                                "enum": ["RecreateGroupOnPodRestart", "None"],
                                "description": "RecreateGroupOnPodRestart: a pod of the group that fails or "
                                "restarts makes the controller recreate the whole group; None: only the pod's own "
                                "restartPolicy applies",
                            },
                            "leaderTemplate": _POD_TEMPLATE,
                            "workerTemplate": _POD_TEMPLATE,
                        },
                        # the API requires workerTemplate only; size defaults to 1 there, which would silently
                        # shrink a multi-node group, so our renderer must always say it
                        required=("size", "workerTemplate"),
                    ),
                },
                required=("leaderWorkerTemplate",),
            ),
        },
        required=("apiVersion", "kind", "metadata", "spec"),
    ),
}


def _core(doc: dict[str, Any]) -> None:
    import kubernetes_validate

    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        raise AssertionError(f"{doc['kind']} {doc['metadata']['name']}: {e}") from None


def check_lws(doc: dict[str, Any]) -> None:
    import jsonschema

    errors = [
        f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in jsonschema.Draft202012Validator(LWS_SCHEMA).iter_errors(doc)
    ]
    assert not errors, errors
    lwt = doc["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        if role not in lwt:
            continue
        template = lwt[role]
        name = f"{doc['metadata']['name']}-{role}"
        _core(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, **template["metadata"]},
                "spec": template["spec"],
            }
        )


def check_prometheus_rule(doc: dict[str, Any]) -> None:
    assert doc["apiVersion"] == "monitoring.coreos.com/v1" and set(doc) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(doc["spec"]) == {"groups"}
    for group in doc["spec"]["groups"]:
        assert set(group) == {"name", "rules"} and group["rules"]
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"} and {"alert", "expr"} <= set(rule)
            assert all(isinstance(v, str) for v in (*rule["labels"].values(), *rule["annotations"].values()))


def validate(doc: dict[str, Any]) -> str:
    """Validate one manifest; returns what it was validated against. AssertionError when it is not valid."""
    if doc["kind"] == "LeaderWorkerSet":
        check_lws(doc)
        return f"LWS {LWS_API}"
    if doc["kind"] == "PrometheusRule":
        check_prometheus_rule(doc)
        return "shape"
    _core(doc)
    return f"Kubernetes {K8S_VERSION}"
