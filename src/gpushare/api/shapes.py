"""Shape checks of what readers depend on, before an object is stored: the one home of
every shape rule. Pure functions returning field causes: metadata (label and annotation
maps, finalizers, ownerReferences), resource quantities, pod spec and status shapes (also
used by the node agent on the pods it is given), RBAC subjects, roleRefs and rules,
structural CRD schemas. Rules about meaning rather than shape (names, GPU annotations,
workloads, queues) are in the API server's `validation`. Pure: the API server, the agent
and the syncer all check with these."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gpushare.api.quantity import QuantityError, parse_quantity


@dataclass
class Cause:
    """One field's fault, as a Kubernetes `Status` lists it under ``details.causes``."""

    field: str
    message: str
    reason: str = "FieldValueInvalid"

    def to_dict(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message, "field": self.field}


_QUALIFIED = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


def quantity_value(value: Any) -> Decimal | None:
    """The value of a Kubernetes quantity ("100m", "2Gi", "1e3", 4), or None if invalid,
    not finite or out of range (`gpushare.api.quantity`)."""
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def _strings(value: Any, path: str, causes: list[Cause]) -> None:
    if value is None:
        return
    if not isinstance(value, list):
        causes.append(Cause(path, "must be a list of strings", "FieldValueTypeInvalid"))
        return
    for i, item in enumerate(value):
        if not isinstance(item, str):
            causes.append(Cause(f"{path}[{i}]", "must be a string", "FieldValueTypeInvalid"))


def _string_map(value: Any, path: str, causes: list[Cause]) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        causes.append(Cause(path, "must be a map of strings", "FieldValueTypeInvalid"))
        return
    for k, v in value.items():
        if not isinstance(v, str):
            causes.append(Cause(f"{path}.{k}", "must be a string", "FieldValueTypeInvalid"))


def _objects(value: Any, path: str, causes: list[Cause]) -> list[tuple[str, dict[str, Any]]]:
    """The (path, item) pairs of a list that must hold objects; causes for the others."""
    if value is None:
        return []
    if not isinstance(value, list):
        causes.append(Cause(path, "must be a list of objects", "FieldValueTypeInvalid"))
        return []
    out = []
    for i, item in enumerate(value):
        if isinstance(item, dict):
            out.append((f"{path}[{i}]", item))
        else:
            causes.append(Cause(f"{path}[{i}]", "must be an object", "FieldValueTypeInvalid"))
    return out


# -- metadata ----------------------------------------------------------------------------------

def metadata_causes(meta: dict[str, Any]) -> list[Cause]:
    """Labels and annotations (maps of strings), finalizers (qualified names),
    ownerReferences (complete objects, one controller at most), namespace, generateName."""
    causes: list[Cause] = []
    for key in ("labels", "annotations"):
        _string_map(meta.get(key), f"metadata.{key}", causes)
    finalizers = meta.get("finalizers")
    _strings(finalizers, "metadata.finalizers", causes)
    if isinstance(finalizers, list):
        for i, f in enumerate(finalizers):
            if isinstance(f, str) and (len(f) > 316 or not _QUALIFIED.match(f)):
                causes.append(Cause(f"metadata.finalizers[{i}]",
                                    f'Invalid value: "{f}": a finalizer must be a qualified '
                                    "name (an optional DNS subdomain prefix and '/', then a "
                                    "name)"))
    controllers = 0
    for path, ref in _objects(meta.get("ownerReferences"), "metadata.ownerReferences", causes):
        for key in ("apiVersion", "kind", "name", "uid"):
            if not isinstance(ref.get(key), str) or not ref[key]:
                causes.append(Cause(f"{path}.{key}", "Required value: must be a non-empty "
                                                     "string", "FieldValueRequired"))
        for key in ("controller", "blockOwnerDeletion"):
            if ref.get(key) is not None and not isinstance(ref[key], bool):
                causes.append(Cause(f"{path}.{key}", "must be a boolean",
                                    "FieldValueTypeInvalid"))
        controllers += ref.get("controller") is True
    if controllers > 1:
        causes.append(Cause("metadata.ownerReferences", "Invalid value: only one reference can "
                                                        "have Controller set to true"))
    for key in ("namespace", "generateName"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            causes.append(Cause(f"metadata.{key}", "must be a string", "FieldValueTypeInvalid"))
    return causes


# -- container resources -----------------------------------------------------------------------

_NATIVE = {"cpu", "memory", "ephemeral-storage", "storage"}


def _extended(name: str) -> bool:
    """An extended resource (`nvidia.com/gpu`): integers only, never overcommitted."""
    if name in _NATIVE or name.startswith(("hugepages-", "requests.", "limits.")):
        return False
    return "/" in name and not name.split("/", 1)[0].endswith("kubernetes.io")


def _quantities(resources: dict[str, Any], part: str, path: str,
                causes: list[Cause]) -> dict[str, Decimal]:
    """The valid quantities of `resources[part]` (requests or limits); causes for the rest."""
    entries = resources.get(part)
    if entries is None:
        return {}
    if not isinstance(entries, dict):
        causes.append(Cause(f"{path}.{part}", "must be a map of quantities",
                            "FieldValueTypeInvalid"))
        return {}
    values: dict[str, Decimal] = {}
    for name, raw in entries.items():
        field = f"{path}.{part}[{name}]"
        value = quantity_value(raw)
        if value is None:
            causes.append(Cause(field, f'Invalid value: "{raw}": quantities must match the '
                                       "regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*"
                                       "[-+]?[0-9]*)$' and be finite and at most 2^63/1000"))
        elif value < 0:
            causes.append(Cause(field, f'Invalid value: "{raw}": must be greater than or '
                                       "equal to 0"))
        elif _extended(name) and value != value.to_integral_value():
            causes.append(Cause(field, f'Invalid value: "{raw}": must be an integer'))
        else:
            values[name] = value
    return values


def resources_causes(resources: Any, path: str) -> list[Cause]:
    """A container's requests and limits, as Kubernetes checks them: quantities, requests
    at most the limits, extended resources (GPUs) integral with requests equal to limits."""
    if resources is None:
        return []
    if not isinstance(resources, dict):
        return [Cause(path, "must be an object", "FieldValueTypeInvalid")]
    causes: list[Cause] = []
    limits = _quantities(resources, "limits", path, causes)
    requests = _quantities(resources, "requests", path, causes)
    for name, req in requests.items():
        shown = resources["requests"][name]
        if not _extended(name):
            if name in limits and req > limits[name]:
                causes.append(Cause(f"{path}.requests[{name}]", f'Invalid value: "{shown}": '
                                    f"must be less than or equal to {name} limit of "
                                    f"{resources['limits'][name]}"))
            continue
        if name not in limits:
            causes.append(Cause(f"{path}.limits", "Required value: Limit must be set for non "
                                                  "overcommitable resources",
                                "FieldValueRequired"))
        elif req != limits[name]:
            causes.append(Cause(f"{path}.requests[{name}]", f'Invalid value: "{shown}": must '
                                f"be equal to {name} limit of {resources['limits'][name]}"))
    return causes


# -- pods --------------------------------------------------------------------------------------

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_RESTART_POLICIES = (None, "Always", "OnFailure", "Never")


def container_causes(c: dict[str, Any], path: str) -> list[Cause]:
    """One container (of containers, initContainers or ephemeralContainers)."""
    causes: list[Cause] = []
    name = c.get("name")
    if not isinstance(name, str) or not name:
        causes.append(Cause(f"{path}.name", "Required value", "FieldValueRequired"))
    elif len(name) > 63 or not _DNS1123_LABEL.match(name):
        causes.append(Cause(f"{path}.name", f'Invalid value: "{name}": must be a DNS-1123 '
                                            "label"))
    if not c.get("image"):
        causes.append(Cause(f"{path}.image", "Required value", "FieldValueRequired"))
    _strings(c.get("command"), f"{path}.command", causes)
    _strings(c.get("args"), f"{path}.args", causes)
    for epath, env in _objects(c.get("env"), f"{path}.env", causes):
        if not isinstance(env.get("name"), str) or not env["name"]:
            causes.append(Cause(f"{epath}.name", "Required value", "FieldValueRequired"))
        if env.get("value") is not None and not isinstance(env["value"], str):
            causes.append(Cause(f"{epath}.value", "must be a string", "FieldValueTypeInvalid"))
    _objects(c.get("envFrom"), f"{path}.envFrom", causes)
    _objects(c.get("volumeMounts"), f"{path}.volumeMounts", causes)
    for ppath, port in _objects(c.get("ports"), f"{path}.ports", causes):
        value = port.get("containerPort")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
            causes.append(Cause(f"{ppath}.containerPort", f"Invalid value: {value!r}: must be "
                                                          "between 1 and 65535, inclusive"))
    causes += resources_causes(c.get("resources"), f"{path}.resources")
    for key in ("workingDir", "image", "imagePullPolicy"):
        if c.get(key) is not None and not isinstance(c[key], str):
            causes.append(Cause(f"{path}.{key}", "must be a string", "FieldValueTypeInvalid"))
    return causes


def _containers(spec: dict[str, Any], path: str, causes: list[Cause]) -> None:
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        causes.append(Cause(f"{path}.containers", "Required value", "FieldValueRequired"))
    seen: set[str] = set()
    for key in ("containers", "initContainers", "ephemeralContainers"):
        value = [] if key == "containers" and not isinstance(containers, list) else spec.get(key)
        for cpath, c in _objects(value, f"{path}.{key}", causes):
            causes += container_causes(c, cpath)
            name = c.get("name")
            if isinstance(name, str) and name:
                if name in seen:
                    causes.append(Cause(f"{cpath}.name", f'Duplicate value: "{name}"',
                                        "FieldValueDuplicate"))
                seen.add(name)


def volume_mount_causes(spec: Any, path: str) -> list[Cause]:
    """Each container's volume mounts name volumes of the pod spec, as kube-apiserver
    requires of a pod and of a Job's, Deployment's or ReplicaSet's template (not of a
    StatefulSet's, whose claim templates add volumes). A pod made from another, a tenant's
    host pod say, must never carry a dangling mount: a real cluster refuses it."""
    if not isinstance(spec, dict):
        return []
    causes: list[Cause] = []
    volumes = {v.get("name") for _, v in _objects(spec.get("volumes"), "", [])}
    for key in ("containers", "initContainers", "ephemeralContainers"):
        for cpath, c in _objects(spec.get(key), f"{path}.{key}", []):
            for mpath, mount in _objects(c.get("volumeMounts"), f"{cpath}.volumeMounts", []):
                name = mount.get("name")
                if isinstance(name, str) and name and name not in volumes:
                    causes.append(Cause(f"{mpath}.name", f'Not found: "{name}"',
                                        "FieldValueNotFound"))
    return causes


def pod_spec_causes(spec: Any, path: str) -> list[Cause]:
    """Every shape rule of a pod spec (a pod's, or a workload's template): the containers
    and their fields, the lists and maps readers walk, restart policy and grace period."""
    if not isinstance(spec, dict):
        return [Cause(path, "Required value", "FieldValueRequired")]
    causes: list[Cause] = []
    _containers(spec, path, causes)
    _objects(spec.get("volumes"), f"{path}.volumes", causes)
    _objects(spec.get("tolerations"), f"{path}.tolerations", causes)
    _objects(spec.get("imagePullSecrets"), f"{path}.imagePullSecrets", causes)
    _string_map(spec.get("nodeSelector"), f"{path}.nodeSelector", causes)
    for key in ("nodeName", "schedulerName", "serviceAccountName", "priorityClassName",
                "hostname"):
        if spec.get(key) is not None and not isinstance(spec[key], str):
            causes.append(Cause(f"{path}.{key}", "must be a string", "FieldValueTypeInvalid"))
    for key in ("affinity", "securityContext", "overhead"):
        if spec.get(key) is not None and not isinstance(spec[key], dict):
            causes.append(Cause(f"{path}.{key}", "must be an object", "FieldValueTypeInvalid"))
    priority = spec.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        causes.append(Cause(f"{path}.priority", "must be an integer", "FieldValueTypeInvalid"))
    policy = spec.get("restartPolicy")
    if policy not in _RESTART_POLICIES:
        causes.append(Cause(f"{path}.restartPolicy", f'Unsupported value: "{policy}": supported '
                                                     'values: "Always", "OnFailure", "Never"',
                            "FieldValueNotSupported"))
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None and (isinstance(grace, bool) or not isinstance(grace, int)
                              or grace < 0):
        causes.append(Cause(f"{path}.terminationGracePeriodSeconds", "must be a non-negative "
                                                                     "integer"))
    return causes


def pod_causes(pod: dict[str, Any]) -> list[Cause]:
    """The shape of a whole stored pod as a reader sees it: its metadata and spec."""
    meta = pod.get("metadata")
    if not isinstance(meta, dict):
        return [Cause("metadata", "must be an object", "FieldValueTypeInvalid")]
    return metadata_causes(meta) + pod_spec_causes(pod.get("spec"), "spec")


def pod_status_causes(status: Any) -> list[Cause]:
    if status is None:
        return []
    if not isinstance(status, dict):
        return [Cause("status", "must be an object", "FieldValueTypeInvalid")]
    causes: list[Cause] = []
    phase = status.get("phase")
    if phase is not None and phase not in _POD_PHASES:
        causes.append(Cause("status.phase", f'Unsupported value: "{phase}": supported values: '
                                            + ", ".join(f'"{p}"' for p in _POD_PHASES),
                            "FieldValueNotSupported"))
    for cpath, cond in _objects(status.get("conditions"), "status.conditions", causes):
        for key in ("type", "status"):
            if not isinstance(cond.get(key), str):
                causes.append(Cause(f"{cpath}.{key}", "Required value: must be a string",
                                    "FieldValueRequired"))
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for spath, cs in _objects(status.get(key), f"status.{key}", causes):
            if cs.get("state") is not None and not isinstance(cs["state"], dict):
                causes.append(Cause(f"{spath}.state", "must be an object",
                                    "FieldValueTypeInvalid"))
            count = cs.get("restartCount")
            if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
                causes.append(Cause(f"{spath}.restartCount", "must be an integer",
                                    "FieldValueTypeInvalid"))
    for key in ("podIP", "hostIP", "reason", "message", "startTime", "qosClass"):
        if status.get(key) is not None and not isinstance(status[key], str):
            causes.append(Cause(f"status.{key}", "must be a string", "FieldValueTypeInvalid"))
    _objects(status.get("podIPs"), "status.podIPs", causes)
    return causes


# -- RBAC --------------------------------------------------------------------------------------

def _role_ref_causes(gr: str, ref: Any) -> list[Cause]:
    if not isinstance(ref, dict) or not ref.get("name") or not ref.get("kind"):
        return [Cause("roleRef", "Required value", "FieldValueRequired")]
    if not isinstance(ref["name"], str):
        return [Cause("roleRef.name", "must be a string", "FieldValueTypeInvalid")]
    if ref["kind"] not in ("Role", "ClusterRole"):
        return [Cause("roleRef.kind", 'Unsupported value: supported values: "Role", '
                                      '"ClusterRole"', "FieldValueNotSupported")]
    if gr.endswith("clusterrolebindings") and ref["kind"] != "ClusterRole":
        return [Cause("roleRef.kind", 'Unsupported value: supported values: "ClusterRole"',
                      "FieldValueNotSupported")]
    return []


def rbac_causes(gr: str, obj: dict[str, Any]) -> list[Cause]:
    """Bindings: a complete roleRef of the right kind, subjects of a known kind with a name.
    Roles: rules that are objects with verbs, every list a list of strings."""
    causes: list[Cause] = []
    if gr.endswith("bindings"):
        causes += _role_ref_causes(gr, obj.get("roleRef"))
        for path, s in _objects(obj.get("subjects"), "subjects", causes):
            kind = s.get("kind")
            if kind not in ("User", "Group", "ServiceAccount"):
                causes.append(Cause(f"{path}.kind", f'Unsupported value: "{kind}": supported '
                                                    'values: "ServiceAccount", "User", "Group"',
                                    "FieldValueNotSupported"))
            if not isinstance(s.get("name"), str) or not s["name"]:
                causes.append(Cause(f"{path}.name", "Required value", "FieldValueRequired"))
            if s.get("namespace") is not None and not isinstance(s["namespace"], str):
                causes.append(Cause(f"{path}.namespace", "must be a string",
                                    "FieldValueTypeInvalid"))
    else:
        for path, rule in _objects(obj.get("rules"), "rules", causes):
            if not rule.get("verbs"):
                causes.append(Cause(f"{path}.verbs", "Required value", "FieldValueRequired"))
            for key in ("verbs", "apiGroups", "resources", "resourceNames", "nonResourceURLs"):
                _strings(rule.get(key), f"{path}.{key}", causes)
    return causes


# -- CRD schemas -------------------------------------------------------------------------------

_TYPES = ("object", "array", "string", "integer", "number", "boolean")
_FORBIDDEN = ("$ref", "additionalItems", "patternProperties", "dependencies", "definitions",
              "id", "$schema")


def structural_causes(schema: Any, path: str, root: bool = True) -> list[Cause]:
    """Where an openAPIV3Schema breaks Kubernetes' structural-schema rules: every node has
    a type (unless int-or-string or preserving unknown fields), properties/items are
    schemas, no `$ref` and other forbidden keywords, the root is an object."""
    if schema is None:
        return []
    if not isinstance(schema, dict):
        return [Cause(path, "must be an object (a schema)", "FieldValueTypeInvalid")]
    causes: list[Cause] = []
    for key in _FORBIDDEN:
        if key in schema:
            causes.append(Cause(f"{path}.{key}", f"Forbidden: {key} is not supported",
                                "FieldValueForbidden"))
    typ = schema.get("type")
    # Kubernetes wants a type even beside oneOf/anyOf; this server evaluates those
    # branches itself, so a node typed only through them is accepted.
    loose = schema.get("x-kubernetes-int-or-string") is True or schema.get(
        "x-kubernetes-preserve-unknown-fields") is True or any(
        isinstance(schema.get(k), list) for k in ("oneOf", "anyOf", "allOf"))
    if typ is None:
        if not loose:
            causes.append(Cause(f"{path}.type", "Required value: must not be empty for "
                                                "specified object fields", "FieldValueRequired"))
    elif typ not in _TYPES:
        causes.append(Cause(f"{path}.type", f'Unsupported value: "{typ}": supported values: '
                                            + ", ".join(f'"{t}"' for t in _TYPES),
                            "FieldValueNotSupported"))
    if root and typ not in (None, "object"):
        causes.append(Cause(f"{path}.type", 'Invalid value: must be "object" at the root'))
    props = schema.get("properties")
    if props is not None:
        if not isinstance(props, dict):
            causes.append(Cause(f"{path}.properties", "must be a map of schemas",
                                "FieldValueTypeInvalid"))
        else:
            for key, sub in props.items():
                causes += structural_causes(sub, f"{path}.properties[{key}]", False)
    items = schema.get("items")
    if items is not None:
        if not isinstance(items, dict):
            causes.append(Cause(f"{path}.items", "must be a schema (an object); lists of "
                                                 "schemas are not supported",
                                "FieldValueTypeInvalid"))
        else:
            causes += structural_causes(items, f"{path}.items", False)
    elif typ == "array":
        causes.append(Cause(f"{path}.items", "Required value: must be specified",
                            "FieldValueRequired"))
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        if props:
            causes.append(Cause(f"{path}.additionalProperties", "Forbidden: additionalProperties "
                                                                "and properties are mutually "
                                                                "exclusive",
                                "FieldValueForbidden"))
        causes += structural_causes(extra, f"{path}.additionalProperties", False)
    elif extra is not None and not isinstance(extra, bool):
        causes.append(Cause(f"{path}.additionalProperties", "must be a schema or a boolean",
                            "FieldValueTypeInvalid"))
    required = schema.get("required")
    if required is not None:
        _strings(required, f"{path}.required", causes)
    enum = schema.get("enum")
    if enum is not None and not isinstance(enum, list):
        causes.append(Cause(f"{path}.enum", "must be a list", "FieldValueTypeInvalid"))
    for key in ("allOf", "anyOf", "oneOf"):
        branches = schema.get(key)
        if branches is None:
            continue
        if not isinstance(branches, list):
            causes.append(Cause(f"{path}.{key}", "must be a list of schemas",
                                "FieldValueTypeInvalid"))
            continue
        for i, sub in enumerate(branches):
            if not isinstance(sub, dict):
                causes.append(Cause(f"{path}.{key}[{i}]", "must be a schema",
                                    "FieldValueTypeInvalid"))
    if schema.get("not") is not None and not isinstance(schema["not"], dict):
        causes.append(Cause(f"{path}.not", "must be a schema", "FieldValueTypeInvalid"))
    return causes


def crd_causes(crd: dict[str, Any]) -> list[Cause]:
    spec = crd.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("versions"), list):
        return []
    causes: list[Cause] = []
    names = spec.get("names")
    if not isinstance(names, dict):
        causes.append(Cause("spec.names", "must be an object", "FieldValueTypeInvalid"))
    for i, v in enumerate(spec["versions"]):
        if not isinstance(v, dict):
            continue
        wrapper = v.get("schema")
        if wrapper is None:
            continue
        if not isinstance(wrapper, dict):
            causes.append(Cause(f"spec.versions[{i}].schema", "must be an object",
                                "FieldValueTypeInvalid"))
            continue
        causes += structural_causes(wrapper.get("openAPIV3Schema"),
                                    f"spec.versions[{i}].schema.openAPIV3Schema")
        columns = v.get("additionalPrinterColumns")
        for path, col in _objects(columns, f"spec.versions[{i}].additionalPrinterColumns",
                                  causes):
            for key in ("name", "type", "jsonPath"):
                if not isinstance(col.get(key), str) or not col[key]:
                    causes.append(Cause(f"{path}.{key}", "Required value",
                                        "FieldValueRequired"))
    return causes
