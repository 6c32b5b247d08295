"""Decoding of Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`).

kubectl's typed clients (`kubectl create namespace|configmap|secret|role|...`,
`kubectl auth can-i`, `kubectl drain`) send protobuf. This decodes the envelope and the
kinds those commands send, by field number, into the JSON form the rest of the server uses.
Responses are always JSON (clients also accept it). Unknown fields are skipped.
"""

from __future__ import annotations

import base64
from typing import Any

from gpushare.api.timefmt import rfc3339, rfc3339_micro
from gpushare.apiserver.errors import ApiError

MAGIC = b"k8s\x00"
PROTOBUF = "application/vnd.kubernetes.protobuf"

# message -> field number -> (json name, type, repeated)
# types: str, bytes, int, bool, time, quantity, intorstr, map:str, map:bytes, map:quantity,
# or the name of another message.
F = tuple[str, str, bool]


def _f(name: str, typ: str = "str", rep: bool = False) -> F:
    return (name, typ, rep)


SCHEMAS: dict[str, dict[int, F]] = {
    "Unknown": {1: _f("typeMeta", "TypeMeta"), 2: _f("raw", "bytes"),
                3: _f("contentEncoding"), 4: _f("contentType")},
    "TypeMeta": {1: _f("apiVersion"), 2: _f("kind")},
    "ObjectMeta": {1: _f("name"), 2: _f("generateName"), 3: _f("namespace"), 5: _f("uid"),
                   6: _f("resourceVersion"), 7: _f("generation", "int"),
                   8: _f("creationTimestamp", "time"), 9: _f("deletionTimestamp", "time"),
                   10: _f("deletionGracePeriodSeconds", "int"), 11: _f("labels", "map:str"),
                   12: _f("annotations", "map:str"),
                   13: _f("ownerReferences", "OwnerReference", True),
                   14: _f("finalizers", "str", True)},
    "OwnerReference": {1: _f("kind"), 3: _f("name"), 4: _f("uid"), 5: _f("apiVersion"),
                       6: _f("controller", "bool"), 7: _f("blockOwnerDeletion", "bool")},
    "ObjectReference": {1: _f("kind"), 2: _f("namespace"), 3: _f("name"), 4: _f("uid"),
                        5: _f("apiVersion"), 6: _f("resourceVersion"), 7: _f("fieldPath")},
    "LocalObjectReference": {1: _f("name")},
    "LabelSelector": {1: _f("matchLabels", "map:str"),
                      2: _f("matchExpressions", "LabelSelectorRequirement", True)},
    "LabelSelectorRequirement": {1: _f("key"), 2: _f("operator"), 3: _f("values", "str", True)},
    "Namespace": {1: _f("metadata", "ObjectMeta"), 2: _f("spec", "NamespaceSpec")},
    "NamespaceSpec": {1: _f("finalizers", "str", True)},
    "ConfigMap": {1: _f("metadata", "ObjectMeta"), 2: _f("data", "map:str"),
                  3: _f("binaryData", "map:bytes"), 4: _f("immutable", "bool")},
    "Secret": {1: _f("metadata", "ObjectMeta"), 2: _f("data", "map:bytes"), 3: _f("type"),
               4: _f("stringData", "map:str"), 5: _f("immutable", "bool")},
    "ServiceAccount": {1: _f("metadata", "ObjectMeta"),
                       2: _f("secrets", "ObjectReference", True),
                       3: _f("imagePullSecrets", "LocalObjectReference", True),
                       4: _f("automountServiceAccountToken", "bool")},
    # `kubectl certificate approve|deny` (certificates.k8s.io/v1)
    "CertificateSigningRequest": {1: _f("metadata", "ObjectMeta"),
                                  2: _f("spec", "CertificateSigningRequestSpec"),
                                  3: _f("status", "CertificateSigningRequestStatus")},
    "CertificateSigningRequestSpec": {1: _f("request", "bytes"), 2: _f("username"),
                                      3: _f("uid"), 4: _f("groups", "str", True),
                                      5: _f("usages", "str", True), 7: _f("signerName"),
                                      8: _f("expirationSeconds", "int")},
    "CertificateSigningRequestStatus": {
        1: _f("conditions", "CertificateSigningRequestCondition", True),
        2: _f("certificate", "bytes")},
    "CertificateSigningRequestCondition": {1: _f("type"), 2: _f("reason"), 3: _f("message"),
                                           4: _f("lastUpdateTime", "time"),
                                           5: _f("lastTransitionTime", "time"),
                                           6: _f("status")},
    "PolicyRule": {1: _f("verbs", "str", True), 2: _f("apiGroups", "str", True),
                   3: _f("resources", "str", True), 4: _f("resourceNames", "str", True),
                   5: _f("nonResourceURLs", "str", True)},
    "Role": {1: _f("metadata", "ObjectMeta"), 2: _f("rules", "PolicyRule", True)},
    "ClusterRole": {1: _f("metadata", "ObjectMeta"), 2: _f("rules", "PolicyRule", True)},
    "Subject": {1: _f("kind"), 2: _f("apiGroup"), 3: _f("name"), 4: _f("namespace")},
    "RoleRef": {1: _f("apiGroup"), 2: _f("kind"), 3: _f("name")},
    "RoleBinding": {1: _f("metadata", "ObjectMeta"), 2: _f("subjects", "Subject", True),
                    3: _f("roleRef", "RoleRef")},
    "ClusterRoleBinding": {1: _f("metadata", "ObjectMeta"), 2: _f("subjects", "Subject", True),
                           3: _f("roleRef", "RoleRef")},
    "PriorityClass": {1: _f("metadata", "ObjectMeta"), 2: _f("value", "int"),
                      3: _f("globalDefault", "bool"), 4: _f("description"),
                      5: _f("preemptionPolicy")},
    "SelfSubjectAccessReview": {1: _f("metadata", "ObjectMeta"),
                                2: _f("spec", "SelfSubjectAccessReviewSpec")},
    "SelfSubjectAccessReviewSpec": {1: _f("resourceAttributes", "ResourceAttributes"),
                                    2: _f("nonResourceAttributes", "NonResourceAttributes")},
    "ResourceAttributes": {1: _f("namespace"), 2: _f("verb"), 3: _f("group"), 4: _f("version"),
                           5: _f("resource"), 6: _f("subresource"), 7: _f("name")},
    "NonResourceAttributes": {1: _f("path"), 2: _f("verb")},
    "DeleteOptions": {1: _f("gracePeriodSeconds", "int"), 2: _f("preconditions",
                                                                "Preconditions"),
                      3: _f("orphanDependents", "bool"), 4: _f("propagationPolicy"),
                      5: _f("dryRun", "str", True)},
    "Preconditions": {1: _f("uid"), 2: _f("resourceVersion")},
    "Eviction": {1: _f("metadata", "ObjectMeta"), 2: _f("deleteOptions", "DeleteOptions")},
    "Binding": {1: _f("metadata", "ObjectMeta"), 2: _f("target", "ObjectReference")},
    "Lease": {1: _f("metadata", "ObjectMeta"), 2: _f("spec", "LeaseSpec")},
    "LeaseSpec": {1: _f("holderIdentity"), 2: _f("leaseDurationSeconds", "int"),
                  3: _f("acquireTime", "microtime"), 4: _f("renewTime", "microtime"),
                  5: _f("leaseTransitions", "int")},
    # Workloads, as `kubectl create deployment|job|cronjob` fill them in.
    "Deployment": {1: _f("metadata", "ObjectMeta"), 2: _f("spec", "DeploymentSpec")},
    "DeploymentSpec": {1: _f("replicas", "int"), 2: _f("selector", "LabelSelector"),
                       3: _f("template", "PodTemplateSpec"),
                       4: _f("strategy", "DeploymentStrategy"),
                       5: _f("minReadySeconds", "int"), 6: _f("revisionHistoryLimit", "int"),
                       7: _f("paused", "bool"), 9: _f("progressDeadlineSeconds", "int")},
    "DeploymentStrategy": {1: _f("type")},
    "Job": {1: _f("metadata", "ObjectMeta"), 2: _f("spec", "JobSpec")},
    "JobSpec": {1: _f("parallelism", "int"), 2: _f("completions", "int"),
                3: _f("activeDeadlineSeconds", "int"), 4: _f("selector", "LabelSelector"),
                5: _f("manualSelector", "bool"), 6: _f("template", "PodTemplateSpec"),
                7: _f("backoffLimit", "int"), 8: _f("ttlSecondsAfterFinished", "int"),
                9: _f("completionMode"), 10: _f("suspend", "bool")},
    "CronJob": {1: _f("metadata", "ObjectMeta"), 2: _f("spec", "CronJobSpec")},
    "CronJobSpec": {1: _f("schedule"), 2: _f("startingDeadlineSeconds", "int"),
                    3: _f("concurrencyPolicy"), 4: _f("suspend", "bool"),
                    5: _f("jobTemplate", "JobTemplateSpec"),
                    6: _f("successfulJobsHistoryLimit", "int"),
                    7: _f("failedJobsHistoryLimit", "int"), 8: _f("timeZone")},
    "JobTemplateSpec": {1: _f("metadata", "ObjectMeta"), 2: _f("spec", "JobSpec")},
    "PodTemplateSpec": {1: _f("metadata", "ObjectMeta"), 2: _f("spec", "PodSpec")},
    "Pod": {1: _f("metadata", "ObjectMeta"), 2: _f("spec", "PodSpec")},
    "PodSpec": {2: _f("containers", "Container", True), 3: _f("restartPolicy"),
                4: _f("terminationGracePeriodSeconds", "int"),
                5: _f("activeDeadlineSeconds", "int"), 6: _f("dnsPolicy"),
                7: _f("nodeSelector", "map:str"), 8: _f("serviceAccountName"),
                9: _f("serviceAccount"), 10: _f("nodeName"), 19: _f("schedulerName"),
                20: _f("initContainers", "Container", True),
                21: _f("automountServiceAccountToken", "bool"), 24: _f("priorityClassName"),
                25: _f("priority", "int")},
    "Container": {1: _f("name"), 2: _f("image"), 3: _f("command", "str", True),
                  4: _f("args", "str", True), 5: _f("workingDir"),
                  6: _f("ports", "ContainerPort", True), 7: _f("env", "EnvVar", True),
                  8: _f("resources", "ResourceRequirements"), 13: _f("terminationMessagePath"),
                  14: _f("imagePullPolicy"), 16: _f("stdin", "bool"),
                  17: _f("stdinOnce", "bool"), 18: _f("tty", "bool"),
                  20: _f("terminationMessagePolicy")},
    "ContainerPort": {1: _f("name"), 2: _f("hostPort", "int"), 3: _f("containerPort", "int"),
                      4: _f("protocol"), 5: _f("hostIP")},
    "EnvVar": {1: _f("name"), 2: _f("value")},
    # `kubectl create service|poddisruptionbudget|quota|ingress`, `auth whoami|can-i --list`.
    "Service": {1: _f("metadata", "ObjectMeta"), 2: _f("spec", "ServiceSpec")},
    "ServiceSpec": {1: _f("ports", "ServicePort", True), 2: _f("selector", "map:str"),
                    3: _f("clusterIP"), 4: _f("type"), 5: _f("externalIPs", "str", True),
                    7: _f("sessionAffinity"), 8: _f("loadBalancerIP"),
                    9: _f("loadBalancerSourceRanges", "str", True), 10: _f("externalName"),
                    11: _f("externalTrafficPolicy"), 12: _f("healthCheckNodePort", "int"),
                    13: _f("publishNotReadyAddresses", "bool"),
                    17: _f("ipFamilyPolicy"), 18: _f("clusterIPs", "str", True),
                    19: _f("ipFamilies", "str", True),
                    20: _f("allocateLoadBalancerNodePorts", "bool"),
                    21: _f("loadBalancerClass"), 22: _f("internalTrafficPolicy")},
    "ServicePort": {1: _f("name"), 2: _f("protocol"), 3: _f("port", "int"),
                    4: _f("targetPort", "intorstr"), 5: _f("nodePort", "int"),
                    6: _f("appProtocol")},
    "PodDisruptionBudget": {1: _f("metadata", "ObjectMeta"),
                            2: _f("spec", "PodDisruptionBudgetSpec")},
    "PodDisruptionBudgetSpec": {1: _f("minAvailable", "intorstr"),
                                2: _f("selector", "LabelSelector"),
                                3: _f("maxUnavailable", "intorstr"),
                                4: _f("unhealthyPodEvictionPolicy")},
    "ResourceQuota": {1: _f("metadata", "ObjectMeta"), 2: _f("spec", "ResourceQuotaSpec")},
    "ResourceQuotaSpec": {1: _f("hard", "map:quantity"), 2: _f("scopes", "str", True),
                          3: _f("scopeSelector", "ScopeSelector")},
    "ScopeSelector": {1: _f("matchExpressions", "ScopedResourceSelectorRequirement", True)},
    "ScopedResourceSelectorRequirement": {1: _f("scopeName"), 2: _f("operator"),
                                          3: _f("values", "str", True)},
    "Ingress": {1: _f("metadata", "ObjectMeta"), 2: _f("spec", "IngressSpec")},
    "IngressSpec": {1: _f("defaultBackend", "IngressBackend"), 2: _f("tls", "IngressTLS", True),
                    3: _f("rules", "IngressRule", True), 4: _f("ingressClassName")},
    "IngressTLS": {1: _f("hosts", "str", True), 2: _f("secretName")},
    "IngressRule": {1: _f("host"), 2: _f("", "inline:IngressRuleValue")},
    "IngressRuleValue": {1: _f("http", "HTTPIngressRuleValue")},
    "HTTPIngressRuleValue": {1: _f("paths", "HTTPIngressPath", True)},
    "HTTPIngressPath": {1: _f("path"), 2: _f("backend", "IngressBackend"), 3: _f("pathType")},
    "IngressBackend": {3: _f("resource", "TypedLocalObjectReference"),
                       4: _f("service", "IngressServiceBackend")},
    "TypedLocalObjectReference": {1: _f("apiGroup"), 2: _f("kind"), 3: _f("name")},
    "IngressServiceBackend": {1: _f("name"), 2: _f("port", "ServiceBackendPort")},
    "ServiceBackendPort": {1: _f("name"), 2: _f("number", "int")},
    "SelfSubjectReview": {1: _f("metadata", "ObjectMeta")},
    "SelfSubjectRulesReview": {1: _f("metadata", "ObjectMeta"),
                               2: _f("spec", "SelfSubjectRulesReviewSpec")},
    "SelfSubjectRulesReviewSpec": {1: _f("namespace")},
    "TokenRequest": {1: _f("metadata", "ObjectMeta"), 2: _f("spec", "TokenRequestSpec")},
    "TokenRequestSpec": {1: _f("audiences", "str", True), 3: _f("boundObjectRef",
                                                                 "BoundObjectReference"),
                         4: _f("expirationSeconds", "int")},
    "BoundObjectReference": {1: _f("kind"), 2: _f("apiVersion"), 3: _f("name"), 4: _f("uid")},
    "TokenReview": {1: _f("metadata", "ObjectMeta"), 2: _f("spec", "TokenReviewSpec")},
    "TokenReviewSpec": {1: _f("token"), 2: _f("audiences", "str", True)},
    "ResourceRequirements": {1: _f("limits", "map:quantity"), 2: _f("requests",
                                                                      "map:quantity")},
}

_KIND_MESSAGES = {k for k in SCHEMAS if k[0].isupper()}


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    out: list[tuple[int, int, Any]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        num, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value = data[pos:pos + 8]
            pos += 8
        elif wire == 2:
            length, pos = _varint(data, pos)
            value = data[pos:pos + length]
            pos += length
        elif wire == 5:
            value = data[pos:pos + 4]
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        out.append((num, wire, value))
    return out


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _time(data: bytes, micro: bool = False) -> str | None:
    seconds = nanos = 0
    for num, _w, v in _fields(data):
        if num == 1:
            seconds = _signed(v)
        elif num == 2:
            nanos = v
    if seconds == 0 and nanos == 0:
        return None
    epoch = seconds + nanos / 1e9
    return rfc3339_micro(epoch) if micro else rfc3339(epoch)


def _scalar(typ: str, wire: int, value: Any) -> Any:
    if typ == "str":
        return bytes(value).decode()
    if typ == "bytes":
        return base64.b64encode(bytes(value)).decode()
    if typ == "int":
        return _signed(value)
    if typ == "bool":
        return bool(value)
    if typ == "time":
        return _time(value)
    if typ == "microtime":
        return _time(value, micro=True)
    if typ == "quantity":
        return next((bytes(v).decode() for n, _w, v in _fields(value) if n == 1), "0")
    if typ == "intorstr":
        f = {n: v for n, _w, v in _fields(value)}
        return bytes(f.get(3, b"")).decode() if f.get(1) == 1 else _signed(f.get(2, 0))
    return decode_message(typ, value)


def decode_message(name: str, data: bytes) -> dict[str, Any]:
    schema = SCHEMAS[name]
    out: dict[str, Any] = {}
    for num, wire, value in _fields(data):
        spec = schema.get(num)
        if spec is None:
            continue
        field, typ, rep = spec
        if typ.startswith("inline:"):
            out.update(decode_message(typ[len("inline:"):], value))
            continue
        if typ.startswith("map:"):
            entry = {n: v for n, _w, v in _fields(value)}
            key = bytes(entry.get(1, b"")).decode()
            out.setdefault(field, {})[key] = _scalar(typ[4:], 2, entry.get(2, b""))
            continue
        decoded = _scalar(typ, wire, value)
        if decoded == "" and not rep:
            continue  # Go's JSON omits empty strings; protobuf carries them
        if rep:
            out.setdefault(field, []).append(decoded)
        elif decoded is not None:
            out[field] = decoded
    return out


def decode(body: bytes) -> dict[str, Any]:
    """A JSON-form object from a protobuf request body."""
    if not body.startswith(MAGIC):
        raise ApiError(400, "the protobuf body lacks the Kubernetes envelope", "BadRequest")
    try:
        envelope = decode_message("Unknown", body[len(MAGIC):])
        type_meta = envelope.get("typeMeta") or {}
        kind = type_meta.get("kind", "")
        raw = base64.b64decode(envelope.get("raw", ""))
        if kind not in _KIND_MESSAGES or kind in ("Unknown", "TypeMeta"):
            raise ApiError(415, f"protobuf bodies of kind {kind!r} are not supported; send "
                                "application/json", "UnsupportedMediaType")
        obj = decode_message(kind, raw)
    except (ValueError, IndexError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the protobuf body could not be decoded: {e}", "BadRequest") from e
    if type_meta.get("apiVersion"):
        obj["apiVersion"] = type_meta["apiVersion"]
    obj["kind"] = kind
    return obj
