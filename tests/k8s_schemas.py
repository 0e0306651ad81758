"""Offline schema validation of rendered Kubernetes manifests (docs/kubernetes.md "What was validated").

Core kinds: kubernetes-validate's bundled OpenAPI schemas of Kubernetes K8S_VERSION, strict (an unknown field fails,
where the API server would drop it). LeaderWorkerSet: :data:`LWS_SCHEMA`, kimi-serve's own JSON Schema of the
fields the renderer emits, written from the published LeaderWorkerSet API (``leaderworkerset.x-k8s.io/v1``), closed
at every level (``additionalProperties: false``: a typo or a field the renderer never emits fails), with jsonschema;
then each of its pod templates as a core Pod, strict. A field the renderer starts to emit must be added here, from
the API's documentation. PrometheusRule has no schema here: :func:`check_prometheus_rule` checks its shape by hand,
every annotation and label with :func:`go_template` (no promtool or Python rule parser is in the dev lock: a lexer of
Go's text/template written from text/template/parse/lex.go, which renders the actions the rules use), and the
PromQL strings with :func:`go_unquote`.

Every pod template, whatever the kind, also gets the checks the schemas cannot make (:func:`check_mounts`): its
containers' mount paths are distinct (the API server refuses a pod with two volumes at one mountPath), every mount
names a volume of the pod, and nothing is mounted inside a read-only mount of another volume (the container runtime
cannot create the mount point there).
"""

from __future__ import annotations

import functools
import posixpath
import re
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


@functools.cache
def _core_validator(kind: str, api_version: str) -> Any:
    """kubernetes_validate.validate's validator for one kind, built once (it reloads the schemas on every call):
    the same strict schema of K8S_VERSION, the same definitions, the same Draft 2020-12 validator."""
    import jsonschema
    from kubernetes_validate import utils
    from referencing import Registry, Resource

    version = [v for v in utils.all_versions() if utils.major_minor(v) <= utils.major_minor(K8S_VERSION)][-1]
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema_dir = f"v{version}-local-strict"
    schema = utils.schema_contents(f"kubernetes-json-schema/{schema_dir}/{kind.lower()}-{group}.json", K8S_VERSION)
    defs = utils.schema_contents(f"kubernetes-json-schema/{schema_dir}/_definitions.json", K8S_VERSION)
    registry = Resource.from_contents(defs) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def _core(doc: dict[str, Any]) -> None:
    import jsonschema

    try:
        _core_validator(doc["kind"], doc["apiVersion"]).validate(doc)
    except jsonschema.ValidationError as e:
        raise AssertionError(
            f"{doc['kind']} {doc['metadata']['name']}: {e.message} at {list(e.absolute_path)}"
        ) from None


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
            for text in (*rule["labels"].values(), *rule["annotations"].values()):
                go_template(text)  # Prometheus expands both as Go templates


def validate(doc: dict[str, Any]) -> str:
    """Validate one manifest; returns what it was validated against. AssertionError when it is not valid."""
    for spec in pod_specs(doc):
        check_mounts(spec, f"{doc['kind']} {doc['metadata']['name']}")
    if doc["kind"] == "LeaderWorkerSet":
        check_lws(doc)
        return f"LWS {LWS_API}"
    if doc["kind"] == "PrometheusRule":
        check_prometheus_rule(doc)
        return "shape"
    _core(doc)
    return f"Kubernetes {K8S_VERSION}"


def pod_specs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every pod spec a manifest holds (its templates')."""
    spec = doc.get("spec", {})
    if doc["kind"] == "LeaderWorkerSet":
        lwt = spec["leaderWorkerTemplate"]
        return [lwt[r]["spec"] for r in ("leaderTemplate", "workerTemplate") if r in lwt]
    if doc["kind"] == "CronJob":
        return [spec["jobTemplate"]["spec"]["template"]["spec"]]
    if doc["kind"] in ("Deployment", "StatefulSet", "Job", "DaemonSet", "ReplicaSet"):
        return [spec["template"]["spec"]]
    return [spec] if doc["kind"] == "Pod" else []


def _within(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree.rstrip("/") + "/")


def check_mounts(spec: dict[str, Any], where: str) -> None:
    """Per container: distinct mount paths (as the API server compares them, and as the runtime resolves them),
    every mount naming a volume of the pod, nothing inside another volume's read-only mount."""
    volumes = {v["name"] for v in spec.get("volumes", [])}
    for c in spec.get("initContainers", []) + spec["containers"]:
        mounts = c.get("volumeMounts", [])
        raw = [m["mountPath"] for m in mounts]
        assert len(raw) == len(set(raw)), f"{where} {c['name']}: two volumes at one mountPath: {sorted(raw)}"
        clean = ["/" + posixpath.normpath(p).lstrip("/") for p in raw]
        assert len(clean) == len(set(clean)), f"{where} {c['name']}: mount paths that are one directory: {raw}"
        assert all(p.startswith("/") for p in raw), f"{where} {c['name']}: a relative mountPath: {raw}"
        for m in mounts:
            assert m["name"] in volumes, f"{where} {c['name']}: mounts {m['name']!r}, which is no volume of the pod"
            for outer in mounts:
                if outer is m or outer["name"] == m["name"] or not outer.get("readOnly"):
                    continue
                assert not _within(m["mountPath"], outer["mountPath"]), (
                    f"{where} {c['name']}: {m['mountPath']} is inside the read-only mount {outer['mountPath']}"
                )


# Go's text/template lexer (text/template/parse/lex.go), for what Prometheus does with a rule's annotations and
# labels: text up to "{{", then an action up to "}}" ("{{- " and " -}}" trim), a comment "{{/* */}}". Prometheus
# defines $labels, $externalLabels and $value before the text. Rendered here: actions that are one string, number
# or variable (with fields); any other action is reported, as is every lexical error Go reports.
_GO_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_GO_ESCAPES |= {"\\": "\\", '"': '"', "'": "'"}
_VARIABLES = ("$labels", "$externalLabels", "$value")


def go_unquote(literal: str) -> str:
    """strconv.Unquote of a double-quoted Go (or PromQL) string; AssertionError where Go refuses it."""
    assert len(literal) >= 2 and literal[0] == literal[-1] == '"', f"not a quoted string: {literal!r}"
    body, out, i = literal[1:-1], [], 0
    while i < len(body):
        c = body[i]
        assert c != "\n" and c != '"', f"{literal!r}: a newline or an unescaped quote in a string"
        if c != "\\":
            out.append(c)
            i += 1
            continue
        e = body[i + 1 : i + 2]
        if e in _GO_ESCAPES:
            out.append(_GO_ESCAPES[e])
            i += 2
        elif e in ("x", "u", "U") or e.isdigit():
            width, base, skip = {"x": (2, 16, 2), "u": (4, 16, 2), "U": (8, 16, 2)}.get(e, (3, 8, 1))
            digits = body[i + skip : i + skip + width]
            allowed = "01234567" if base == 8 else "0123456789abcdefABCDEF"
            assert len(digits) == width and all(d in allowed for d in digits), f"{literal!r}: a bad escape at {i}"
            code = int(digits, base)
            assert code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF, f"{literal!r}: an invalid code point"
            out.append(chr(code))
            i += skip + width
        else:
            raise AssertionError(f"{literal!r}: unknown escape \\{e}")
    return "".join(out)


def _action(body: str, labels: dict[str, str], value: str, text: str) -> str:
    """One action's output: a string, a number, or a variable with its fields."""
    words = body.strip(" \t\r\n")
    if words.startswith('"'):
        end = 1
        while end < len(words) and words[end] != '"':
            end += 2 if words[end] == "\\" else 1
        assert end < len(words), f"{text!r}: unterminated quoted string"
        assert not words[end + 1 :].strip(), f"{text!r}: unsupported action {{{{{body}}}}}"
        return go_unquote(words[: end + 1])
    if words.startswith("`"):
        assert words.count("`") == 2 and words.endswith("`"), f"{text!r}: unsupported action {{{{{body}}}}}"
        return words[1:-1]
    if re.fullmatch(r"[0-9]+", words):
        return words
    match = re.fullmatch(r"(\$[A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z_][A-Za-z0-9_]*)*)", words)
    assert match, f"{text!r}: unsupported action {{{{{body}}}}}"
    var, fields = match.group(1), [f for f in match.group(2).split(".") if f]
    assert var in _VARIABLES, f"{text!r}: undefined variable {var!r}"
    if var == "$value":
        assert not fields, f"{text!r}: {var} has no fields"
        return value
    assert len(fields) == 1, f"{text!r}: {var} takes one field"
    return labels.get(fields[0], "<no value>") if var == "$labels" else "<no value>"


def go_template(text: str, labels: dict[str, str] | None = None, value: str = "1") -> str:
    """``text`` rendered as Prometheus renders an annotation (the actions :func:`_action` knows); AssertionError
    where Go's parser fails on it (an unclosed action, an unterminated string, a stray delimiter in an action...)."""
    labels = labels or {}
    out, i = [], 0
    while True:
        start = text.find("{{", i)
        if start < 0:
            out.append(text[i:])
            return "".join(out)
        chunk = text[i:start]
        j = start + 2
        if text[j : j + 1] == "-" and text[j + 1 : j + 2] in (" ", "\t", "\r", "\n"):  # "{{- ": trim left
            chunk = chunk.rstrip(" \t\r\n")
            j += 2
        out.append(chunk)
        if text[j:].lstrip(" \t\r\n").startswith("/*"):  # a comment, closed right before the delimiter
            end = text.find("*/", j)
            assert end >= 0, f"{text!r}: unclosed comment"
            rest = text[end + 2 :]
            close = 3 if rest.startswith(" -}}") else 2 if rest.startswith("}}") else 0
            assert close, f"{text!r}: comment ends before closing delimiter"
            i = end + 2 + close + (1 if close == 3 else 0)
            continue
        # the action: up to the first "}}" outside a quoted string, raw string or character constant
        k, quote = j, None
        while k < len(text):
            c = text[k]
            if quote:
                if c == "\\" and quote != "`":
                    k += 2
                    continue
                assert not (c == "\n" and quote != "`"), f"{text!r}: unterminated quoted string"
                quote = None if c == quote else quote
            elif c in "\"'`":
                quote = c
            elif text.startswith("}}", k):
                break
            k += 1
        assert k < len(text) and not quote, f"{text!r}: unclosed action"
        body = text[j:k]
        trim_right = body.endswith(" -") or body.endswith("\t-") or body.endswith("\n-")
        out.append(_action(body[:-2] if trim_right else body, labels, value, text))
        i = k + 2
        if trim_right:
            rest = text[i:]
            i += len(rest) - len(rest.lstrip(" \t\r\n"))


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion (k8s.io/kubernetes third_party/forked/golang/expansion): `$$` is `$`, `$(NAME)`
    the variable (left as written when undefined), any other `$` itself."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    out.append(env.get(name, f"$({name})"))
                    i = end + 1
                    continue
            out.append("$" + nxt)
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)
