"""CustomResourceDefinitions: turning a CRD into served resources, their schemas, pruning and
defaults (the preinstalled Queue and PodGroup CRDs are `gpushare.api.crds`)."""

from __future__ import annotations

import copy
import ipaddress
import re
from typing import Any

from gpushare.api.objects import field_dict
from gpushare.apiserver.errors import Cause
from gpushare.apiserver.resources import PrinterColumn, ResourceInfo
from gpushare.apiserver.schema import cel_rules

_AGE = PrinterColumn("Age", "date", ".metadata.creationTimestamp")


def crd_resource_infos(crd: dict[str, Any]) -> list[ResourceInfo]:
    """One ResourceInfo per served version of an (already validated) CRD."""
    spec = crd["spec"]
    names = spec["names"]
    group = spec["group"]
    namespaced = spec.get("scope", "Namespaced") == "Namespaced"
    versions = [v for v in spec["versions"] if v.get("served", True)]
    storage = next((v["name"] for v in spec["versions"] if v.get("storage")), versions[0]["name"])
    infos = []
    for v in versions:
        subresources = tuple((v.get("subresources") or {}).keys())
        cols = []
        for c in v.get("additionalPrinterColumns") or ():
            cols.append(
                PrinterColumn(
                    c["name"],
                    c.get("type", "string"),
                    c["jsonPath"],
                    int(c.get("priority", 0)),
                    c.get("description", ""),
                    c.get("format", ""),
                )
            )
        if not any(c.json_path == ".metadata.creationTimestamp" for c in cols):
            cols.append(_AGE)
        schema = (v.get("schema") or {}).get("openAPIV3Schema")
        infos.append(
            ResourceInfo(
                group=group,
                version=v["name"],
                resource=names["plural"],
                kind=names["kind"],
                namespaced=namespaced,
                singular=names.get("singular") or names["kind"].lower(),
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                subresources=tuple(s for s in subresources if s in ("status", "scale")),
                columns=tuple(cols),
                schema=schema,
                storage_version=storage,
                crd=True,
                list_kind=names.get("listKind") or names["kind"] + "List",
            )
        )
    return infos


def established_status(crd: dict[str, Any], now: str) -> dict[str, Any]:
    """The status of an accepted CRD: its names and the Established condition."""
    names = crd["spec"]["names"]
    accepted = {"plural": names["plural"], "singular": names.get("singular") or
                names["kind"].lower(), "kind": names["kind"],
                "listKind": names.get("listKind") or names["kind"] + "List"}
    if names.get("shortNames"):
        accepted["shortNames"] = names["shortNames"]
    if names.get("categories"):
        accepted["categories"] = names["categories"]
    return {
        "acceptedNames": accepted,
        "storedVersions": [v["name"] for v in crd["spec"]["versions"] if v.get("storage")],
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": now},
        ],
    }


def validate_crd(crd: dict[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return [Cause("spec", "Required value", "FieldValueRequired")]
    group = spec.get("group")
    names = spec.get("names") or {}
    if not group or not isinstance(group, str) or "." not in group:
        causes.append(Cause("spec.group", "should be a domain with at least one dot"))
    for key in ("plural", "kind"):
        if not names.get(key):
            causes.append(Cause(f"spec.names.{key}", "Required value", "FieldValueRequired"))
    if not causes:
        expected = f"{names['plural']}.{group}"
        if crd["metadata"].get("name") != expected:
            causes.append(Cause("metadata.name", f'must be spec.names.plural+"."+spec.group: '
                                                 f'"{expected}"'))
    if spec.get("scope", "Namespaced") not in ("Namespaced", "Cluster"):
        causes.append(Cause("spec.scope", 'supported values: "Cluster", "Namespaced"',
                            "FieldValueNotSupported"))
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        causes.append(Cause("spec.versions", "must have exactly one version marked as storage "
                                             "version", "FieldValueRequired"))
    else:
        storage = [v for v in versions if isinstance(v, dict) and v.get("storage")]
        if len(storage) != 1:
            causes.append(Cause("spec.versions", "must have exactly one version marked as "
                                                 "storage version"))
        for i, v in enumerate(versions):
            if not isinstance(v, dict) or not v.get("name"):
                causes.append(Cause(f"spec.versions[{i}].name", "Required value",
                                    "FieldValueRequired"))
                continue
            schema = (v.get("schema") or {}).get("openAPIV3Schema")
            causes += schema_rule_errors(schema, f"spec.versions[{i}].schema.openAPIV3Schema")
    return causes


# -- structural schema validation --------------------------------------------------------------

_TYPE_CHECKS = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
}


_MISSING: Any = object()
MISSING = _MISSING  # no old value (a create)


def validate_against_schema(
    value: Any, schema: dict[str, Any] | None, path: str, causes: list[Cause],
    old: Any = _MISSING,
) -> None:
    """Check a value against an openAPIV3Schema as Kubernetes does for custom resources:
    type, required, enum, bounds, string length, pattern and format, item and property
    counts, unique items, oneOf/anyOf/allOf/not, and `x-kubernetes-validations` CEL rules
    (with `oldSelf`, the stored value, on updates)."""
    if not schema or value is None:
        return
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, str) or _TYPE_CHECKS["integer"](value)):
            causes.append(Cause(path, f"Invalid value: {_short(value)}: must be an integer or "
                                      "a string", "FieldValueTypeInvalid"))
            return
    else:
        typ = schema.get("type")
        if typ and typ in _TYPE_CHECKS and not _TYPE_CHECKS[typ](value):
            causes.append(Cause(path, f'Invalid value: "{_short(value)}": {_p(path)} in body must '
                                      f'be of type {typ}: "{_json_type(value)}"',
                                "FieldValueTypeInvalid"))
            return
    before = len(causes)
    _check_keywords(value, schema, path, causes)
    _check_combinators(value, schema, path, causes)
    if isinstance(value, dict):
        for req in schema.get("required") or ():
            if req not in value:
                causes.append(Cause(f"{path}.{req}", "Required value", "FieldValueRequired"))
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        old_map = old if isinstance(old, dict) else {}
        for k, v in value.items():
            sub = props.get(k) if k in props else (extra if isinstance(extra, dict) else None)
            if sub is not None:
                validate_against_schema(v, sub, f"{path}.{k}", causes,
                                        old_map.get(k, _MISSING) if old_map else _MISSING)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        old_items = _old_items(value, old, schema)
        for i, item in enumerate(value):
            validate_against_schema(item, schema["items"], f"{path}[{i}]", causes,
                                    old_items[i])
    if len(causes) == before:  # rules see only values that are otherwise valid
        _check_rules(value, schema, path, causes, old)


def _old_items(value: list[Any], old: Any, schema: dict[str, Any]) -> list[Any]:
    """The old value of each item: by map keys for list-type map, else none (as Kubernetes
    correlates only keyed items)."""
    out = [_MISSING] * len(value)
    keys = schema.get("x-kubernetes-list-map-keys") or []
    if schema.get("x-kubernetes-list-type") != "map" or not keys or not isinstance(old, list):
        return out
    index = {tuple(o.get(k) for k in keys): o for o in old if isinstance(o, dict)}
    for i, item in enumerate(value):
        if isinstance(item, dict):
            out[i] = index.get(tuple(item.get(k) for k in keys), _MISSING)
    return out


_FORMATS: dict[str, re.Pattern[str]] = {
    "date-time": re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?"
                            r"([Zz]|[+-]\d{2}:\d{2})$"),
    "date": re.compile(r"^\d{4}-\d{2}-\d{2}$"),
    "uuid": re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?"
                       r"[0-9a-fA-F]{12}$"),
    "byte": re.compile(r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"),
    "email": re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$"),
    "hostname": re.compile(r"^(?=.{1,253}$)[a-zA-Z0-9]([-a-zA-Z0-9]{0,61}[a-zA-Z0-9])?"
                           r"(\.[a-zA-Z0-9]([-a-zA-Z0-9]{0,61}[a-zA-Z0-9])?)*$"),
    "uri": re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:[^\s]*$"),
    "duration": re.compile(r"^([-+]?(\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))+$|^0$"),
}


def _format_ok(fmt: str, value: str) -> bool:
    if fmt in ("ipv4", "ipv6", "cidr"):
        try:
            if fmt == "cidr":
                ipaddress.ip_network(value, strict=False)
                return "/" in value
            address = ipaddress.ip_address(value)
            return address.version == (4 if fmt == "ipv4" else 6)
        except ValueError:
            return False
    pattern = _FORMATS.get(fmt)
    return pattern is None or bool(pattern.match(value))


def _check_keywords(value: Any, schema: dict[str, Any], path: str, causes: list[Cause]) -> None:
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(f'"{e}"' for e in schema["enum"])
        causes.append(Cause(path, f'Unsupported value: "{_short(value)}": supported values: '
                                  f'{allowed}', "FieldValueNotSupported"))
    if isinstance(value, int | float) and not isinstance(value, bool):
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is not None and (value < low or (schema.get("exclusiveMinimum") is True
                                                and value == low)):
            word = "greater than" if schema.get("exclusiveMinimum") is True else \
                "greater than or equal to"
            causes.append(Cause(path, f"Invalid value: {value}: {_p(path)} in body should be "
                                      f"{word} {low}"))
        if high is not None and (value > high or (schema.get("exclusiveMaximum") is True
                                                  and value == high)):
            word = "less than" if schema.get("exclusiveMaximum") is True else \
                "less than or equal to"
            causes.append(Cause(path, f"Invalid value: {value}: {_p(path)} in body should be "
                                      f"{word} {high}"))
        step = schema.get("multipleOf")
        if step and (value / step) != int(value / step):
            causes.append(Cause(path, f"Invalid value: {value}: {_p(path)} in body should be a "
                                      f"multiple of {step}"))
    if isinstance(value, str):
        if schema.get("maxLength") is not None and len(value) > schema["maxLength"]:
            causes.append(Cause(path, f'Too long: may not be more than {schema["maxLength"]} '
                                      "bytes", "FieldValueTooLong"))
        if schema.get("minLength") is not None and len(value) < schema["minLength"]:
            causes.append(Cause(path, f'Invalid value: "{_short(value)}": {_p(path)} in body '
                                      f'should be at least {schema["minLength"]} chars long'))
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            try:
                matched = re.search(pattern, value) is not None
            except re.error:
                matched = True  # a pattern Python cannot compile is not held against data
            if not matched:
                causes.append(Cause(path, f'Invalid value: "{_short(value)}": {_p(path)} in body '
                                          f'should match \'{pattern}\''))
        fmt = schema.get("format")
        if isinstance(fmt, str) and not _format_ok(fmt, value):
            causes.append(Cause(path, f'Invalid value: "{_short(value)}": {_p(path)} in body must '
                                      f"be of type {fmt}: \"{_short(value)}\""))
    if isinstance(value, list):
        if schema.get("maxItems") is not None and len(value) > schema["maxItems"]:
            causes.append(Cause(path, f"Too many: {len(value)}: must have at most "
                                      f"{schema['maxItems']} items", "FieldValueTooMany"))
        if schema.get("minItems") is not None and len(value) < schema["minItems"]:
            causes.append(Cause(path, f"Invalid value: {len(value)}: {_p(path)} in body should "
                                      f"have at least {schema['minItems']} items"))
        unique = schema.get("uniqueItems") or schema.get("x-kubernetes-list-type") == "set"
        if unique:
            seen: list[Any] = []
            for i, item in enumerate(value):
                if item in seen:
                    causes.append(Cause(f"{path}[{i}]", f"Duplicate value: {_short(item)}",
                                        "FieldValueDuplicate"))
                else:
                    seen.append(item)
    if isinstance(value, dict):
        if schema.get("maxProperties") is not None and len(value) > schema["maxProperties"]:
            causes.append(Cause(path, f"Too many: {len(value)}: must have at most "
                                      f"{schema['maxProperties']} items", "FieldValueTooMany"))
        if schema.get("minProperties") is not None and len(value) < schema["minProperties"]:
            causes.append(Cause(path, f"Invalid value: {len(value)}: {_p(path)} in body should "
                                      f"have at least {schema['minProperties']} properties"))


def _valid(value: Any, schema: Any, path: str) -> bool:
    found: list[Cause] = []
    if isinstance(schema, dict):
        validate_against_schema(value, schema, path, found)
    return not found


def _check_combinators(value: Any, schema: dict[str, Any], path: str,
                       causes: list[Cause]) -> None:
    for sub in schema.get("allOf") or ():
        if isinstance(sub, dict):
            validate_against_schema(value, sub, path, causes)
    if isinstance(schema.get("oneOf"), list):
        passing = sum(1 for sub in schema["oneOf"] if _valid(value, sub, path))
        if passing != 1:
            causes.append(Cause(path, f'Invalid value: "{_short(value)}": {_p(path)} in body must '
                                      "validate one and only one schema (oneOf)"))
    if isinstance(schema.get("anyOf"), list) and not any(
            _valid(value, sub, path) for sub in schema["anyOf"]):
        causes.append(Cause(path, f'Invalid value: "{_short(value)}": {_p(path)} in body must '
                                  "validate at least one schema (anyOf)"))
    if isinstance(schema.get("not"), dict) and _valid(value, schema["not"], path):
        causes.append(Cause(path, f'Invalid value: "{_short(value)}": {_p(path)} in body must not '
                                  "validate the schema (not)"))


def _check_rules(value: Any, schema: dict[str, Any], path: str, causes: list[Cause],
                 old: Any) -> None:
    for rule in schema.get("x-kubernetes-validations") or ():
        if not isinstance(rule, dict) or not isinstance(rule.get("rule"), str):
            continue
        text = rule["rule"]
        has_old = old is not _MISSING and old is not None
        if cel_rules.is_transition(text) and not has_old:
            continue
        passed, error = cel_rules.evaluate(text, value, old, has_old)
        if passed:
            continue
        message = error or rule.get("message") or f"failed rule: {text}"
        field = path
        if isinstance(rule.get("fieldPath"), str):
            field = path + rule["fieldPath"]
        shown = '"object"' if isinstance(value, dict) else f'"{_json_type(value)}"' \
            if isinstance(value, list) else f'"{_short(value)}"'
        reason = {"FieldValueRequired": "FieldValueRequired",
                  "FieldValueDuplicate": "FieldValueDuplicate",
                  "FieldValueForbidden": "FieldValueForbidden"}.get(rule.get("reason", ""),
                                                                     "FieldValueInvalid")
        causes.append(Cause(field, f"Invalid value: {shown}: {message}", reason))


def schema_rule_errors(schema: Any, path: str) -> list[Cause]:
    """Causes for CEL rules of a CRD schema that do not compile."""
    out: list[Cause] = []
    if isinstance(schema, dict):
        for i, rule in enumerate(schema.get("x-kubernetes-validations") or ()):
            text = rule.get("rule") if isinstance(rule, dict) else None
            if not isinstance(text, str):
                out.append(Cause(f"{path}.x-kubernetes-validations[{i}].rule",
                                 "Required value", "FieldValueRequired"))
                continue
            error = cel_rules.check(text)
            if error:
                out.append(Cause(f"{path}.x-kubernetes-validations[{i}].rule",
                                 f'Invalid value: "{text}": {error}'))
        for key, sub in (schema.get("properties") or {}).items():
            out += schema_rule_errors(sub, f"{path}.properties[{key}]")
        for key in ("items", "additionalProperties"):
            if isinstance(schema.get(key), dict):
                out += schema_rule_errors(schema[key], f"{path}.{key}")
    return out


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) < 60 else text[:57] + "..."


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number" if isinstance(value, float) else "integer"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


# -- pruning of unknown fields (structural schemas) ----------------------------------------------

_TOP_LEVEL_KEPT = ("apiVersion", "kind", "metadata")


def prune_unknown(obj: dict[str, Any], schema: dict[str, Any] | None) -> list[str]:
    """Remove fields the schema does not declare, like Kubernetes does for CRDs.

    Returns the paths removed (for `fieldValidation=Strict`, which rejects them instead).
    """
    if not schema or schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    removed: list[str] = []
    props = schema.get("properties") or {}
    for key in list(obj):
        if key in _TOP_LEVEL_KEPT:
            continue
        if key in props:
            _prune(obj[key], props[key], key, removed)
        else:
            removed.append(key)
            del obj[key]
    return removed


def _prune(value: Any, schema: Any, path: str, removed: list[str]) -> None:
    if not isinstance(schema, dict) or schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props is None and extra is None and schema.get("type") != "object":
            return
        for key in list(value):
            if props and key in props:
                _prune(value[key], props[key], f"{path}.{key}", removed)
            elif isinstance(extra, dict):
                _prune(value[key], extra, f"{path}.{key}", removed)
            elif extra is True:
                continue
            else:
                removed.append(f"{path}.{key}")
                del value[key]
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _prune(item, schema["items"], f"{path}[{i}]", removed)


def _p(path: str) -> str:
    """A path as messages show it (`spec.owner`, without the leading dot)."""
    return path.lstrip(".")


# -- defaulting (structural schemas) -----------------------------------------------------------

_HAS_DEFAULTS: dict[int, tuple[Any, bool]] = {}


def has_defaults(schema: Any) -> bool:
    """Whether a schema declares any `default` (memoized per schema object)."""
    if not isinstance(schema, dict):
        return False
    hit = _HAS_DEFAULTS.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    found = _declares_default(schema)
    if len(_HAS_DEFAULTS) < 10_000:
        _HAS_DEFAULTS[id(schema)] = (schema, found)
    return found


def _declares_default(node: Any) -> bool:
    if isinstance(node, dict):
        return "default" in node or any(_declares_default(v) for k, v in node.items()
                                        if k in ("properties", "items", "additionalProperties")
                                        or (isinstance(v, dict) and k not in ("default",
                                                                             "example")))
    if isinstance(node, list):
        return any(_declares_default(v) for v in node)
    return False


def apply_defaults(value: Any, schema: Any, root: bool = True) -> bool:
    """Fill in missing fields that declare a `default`, as Kubernetes defaults custom
    resources (on requests and when reading from storage); the object's metadata is never
    defaulted. Returns whether anything was added."""
    if not isinstance(schema, dict):
        return False
    changed = False
    if isinstance(value, dict):
        props = field_dict(schema, "properties")
        for key, sub in props.items():
            if key not in value and not (root and key == "metadata") \
                    and isinstance(sub, dict) and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
                changed = True
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if root and key == "metadata":
                continue
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            changed = apply_defaults(item, sub, False) or changed
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            changed = apply_defaults(item, schema["items"], False) or changed
    return changed


def defaulted(obj: dict[str, Any], schema: Any) -> dict[str, Any]:
    """`obj` with the schema's defaults (a copy when any was missing, else `obj`)."""
    if not has_defaults(schema):
        return obj
    out = copy.deepcopy(obj)
    return out if apply_defaults(out, schema) else obj
