"""Generate `src/gpushare/apiserver/schema/builtin_schemas.json` from Kubernetes' published schemas.

The source is public data: the JSON-schema form of the Kubernetes 1.32 OpenAPI definitions
that the `kubernetes-validate` package ships (`v1.32.0-local/_definitions.json`, generated
from `api/openapi-spec` of the release). This script turns it back into OpenAPI form (one
type per schema, int-or-string and quantities as Kubernetes publishes them, no `enum` on
`apiVersion`/`kind`), keeps only the definitions reachable from the kinds the embedded server
serves, and writes them compactly with their `x-kubernetes-*` extensions (patch strategy and
merge keys, list types and map keys, group-version-kind), which the OpenAPI documents,
strategic merge patch and server-side apply all read.

    pip download kubernetes-validate==1.32.0 --no-deps -d /tmp/kv
    python tools/gen_builtin_schemas.py /tmp/kv/kubernetes_validate-1.32.0-py3-none-any.whl
"""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path
from typing import Any

SOURCE = "kubernetes_validate/kubernetes-json-schema/v1.32.0-local/_definitions.json"
OUT = Path(__file__).resolve().parents[1] / "src/gpushare/apiserver/schema/builtin_schemas.json"

# (group, version, kind) of every kind the server serves or answers with.
KINDS = [
    ("", "v1", k) for k in (
        "Namespace", "Node", "Pod", "Event", "ConfigMap", "Secret", "ServiceAccount",
        "Service", "Endpoints", "ResourceQuota", "ReplicationController", "PodTemplate",
        "LimitRange", "Binding")
] + [
    ("scheduling.k8s.io", "v1", "PriorityClass"),
    ("coordination.k8s.io", "v1", "Lease"),
    ("batch", "v1", "Job"), ("batch", "v1", "CronJob"),
    ("apps", "v1", "Deployment"), ("apps", "v1", "ReplicaSet"), ("apps", "v1", "StatefulSet"),
    ("apps", "v1", "DaemonSet"), ("apps", "v1", "ControllerRevision"),
    ("policy", "v1", "PodDisruptionBudget"), ("policy", "v1", "Eviction"),
    ("rbac.authorization.k8s.io", "v1", "Role"), ("rbac.authorization.k8s.io", "v1",
                                                   "ClusterRole"),
    ("rbac.authorization.k8s.io", "v1", "RoleBinding"),
    ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
    ("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
    ("authorization.k8s.io", "v1", "SelfSubjectAccessReview"),
    ("authorization.k8s.io", "v1", "SelfSubjectRulesReview"),
    ("authorization.k8s.io", "v1", "SubjectAccessReview"),
    ("authentication.k8s.io", "v1", "SelfSubjectReview"),
    ("authentication.k8s.io", "v1", "TokenRequest"),
    ("networking.k8s.io", "v1", "Ingress"), ("networking.k8s.io", "v1", "IngressClass"),
    ("discovery.k8s.io", "v1", "EndpointSlice"),
    ("node.k8s.io", "v1", "RuntimeClass"),
    ("certificates.k8s.io", "v1", "CertificateSigningRequest"),
    ("events.k8s.io", "v1", "Event"),
    ("autoscaling", "v1", "Scale"),
    ("meta", "v1", "Status"), ("meta", "v1", "DeleteOptions"),
]

_REF = "#/$defs/"
_SPECIAL = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"type": "string",
                                                        "format": "int-or-string"},
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string", "format": "quantity"},
}


def convert(schema: Any) -> Any:
    """JSON-schema form back to OpenAPI form; `$ref`s become bare definition names."""
    if isinstance(schema, list):
        return [convert(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$ref":
            out["$ref"] = value[len(_REF):]
        elif key == "type" and isinstance(value, list):
            types = [t for t in value if t != "null"]
            if len(types) == 1:
                out["type"] = types[0]
        elif key == "properties":
            props = {k: convert(v) for k, v in value.items()}
            for name in ("apiVersion", "kind"):
                if isinstance(props.get(name), dict):
                    props[name].pop("enum", None)
            out[key] = props
        else:
            out[key] = convert(value)
    return out


def refs(schema: Any, found: set[str]) -> None:
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "$ref" and isinstance(value, str):
                found.add(value)
            else:
                refs(value, found)
    elif isinstance(schema, list):
        for value in schema:
            refs(value, found)


def main(wheel: str) -> None:
    with zipfile.ZipFile(wheel) as z:
        source = json.loads(z.read(SOURCE))["$defs"]
    by_gvk: dict[str, str] = {}
    for name, schema in source.items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or ():
            key = f"{gvk['group']}/{gvk['version']}/{gvk['kind']}"
            # A kind in several groups (meta Status, DeleteOptions) keeps the meta one.
            if key not in by_gvk or name.startswith("io.k8s.apimachinery.pkg.apis.meta."):
                by_gvk[key] = name
    kinds: dict[str, str] = {}
    for group, version, kind in KINDS:
        if group == "meta":
            kinds[f"meta/{version}/{kind}"] = f"io.k8s.apimachinery.pkg.apis.meta.v1.{kind}"
            continue
        key = f"{group}/{version}/{kind}"
        if key not in by_gvk:
            raise SystemExit(f"{key} is not in the source schemas")
        kinds[key] = by_gvk[key]
    definitions: dict[str, Any] = {}
    todo = list(kinds.values())
    while todo:
        name = todo.pop()
        if name in definitions:
            continue
        if name in _SPECIAL:
            definitions[name] = {"description": source[name].get("description", ""),
                                 **_SPECIAL[name]}
            continue
        schema = convert(source[name])
        definitions[name] = schema
        found: set[str] = set()
        refs(schema, found)
        todo.extend(sorted(found - definitions.keys()))
    doc = {"source": "Kubernetes v1.32.0 OpenAPI definitions", "kinds": kinds,
           "definitions": dict(sorted(definitions.items()))}
    OUT.write_text(json.dumps(doc, separators=(",", ":"), sort_keys=False) + "\n")
    print(f"{OUT}: {len(kinds)} kinds, {len(definitions)} definitions, "
          f"{OUT.stat().st_size} bytes")


if __name__ == "__main__":
    main(sys.argv[1])
