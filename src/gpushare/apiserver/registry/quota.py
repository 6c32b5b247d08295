"""ResourceQuota: usage of a namespace (`status.used`) and admission of new objects against
`spec.hard`, as Kubernetes' quota controller and admission plugin do. Pure functions over the
namespace's objects; `api.py` calls them on writes to namespaces that have quotas.

Tracked: object counts (`pods`, `services`, `configmaps`, `secrets`,
`replicationcontrollers`, `resourcequotas`, `persistentvolumeclaims`, `services.nodeports`,
`services.loadbalancers`, and `count/<resource>[.<group>]`), and the compute resources of
pods that have not finished: `requests.<name>`/`<name>` and `limits.<name>` for cpu, memory,
ephemeral-storage and extended resources such as `nvidia.com/gpu` (a pod's sum over its
containers, or an init container's if larger). Quota scopes and scope selectors are not
evaluated (a scoped quota counts like an unscoped one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

from gpushare.api.objects import field_dict, field_list
from gpushare.api.shapes import quantity_value
from gpushare.apiserver.errors import ApiError, Cause

QUOTA_GR = "resourcequotas"
# quota name -> storage group/resource of the objects it counts
_COUNTS = {"pods": "pods", "services": "services", "configmaps": "configmaps",
           "secrets": "secrets", "replicationcontrollers": "replicationcontrollers",
           "resourcequotas": "resourcequotas",
           "persistentvolumeclaims": "persistentvolumeclaims"}
_COMPUTE = ("cpu", "memory", "ephemeral-storage")

Lister = Callable[[str], Iterable[dict[str, Any]]]  # group/resource -> objects in namespace


def _count_gr(name: str) -> str | None:
    if name in _COUNTS:
        return _COUNTS[name]
    if name.startswith("count/"):
        resource, _, group = name[len("count/"):].partition(".")
        return f"{group}/{resource}" if group else resource
    return None


def counted_grs(hard: Iterable[str]) -> set[str]:
    out = {g for g in (_count_gr(n) for n in hard) if g}
    if any(n in ("services.nodeports", "services.loadbalancers") for n in hard):
        out.add("services")
    if any(_count_gr(n) is None and not n.startswith("services.") for n in hard):
        out.add("pods")
    return out


def _active(pod: dict[str, Any]) -> bool:
    status = pod.get("status")
    return not isinstance(status, dict) or status.get("phase") not in ("Succeeded", "Failed")


def pod_usage(pod: dict[str, Any]) -> dict[str, Decimal]:
    """The compute quota names a pod uses (`requests.cpu`, `cpu`, `limits.nvidia.com/gpu`)."""
    spec = pod.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    totals: dict[str, dict[str, Decimal]] = {"requests": {}, "limits": {}}
    for part in ("requests", "limits"):
        for key in ("containers", "initContainers"):
            for name, v in _amounts(spec.get(key), part):
                if key == "containers":
                    totals[part][name] = totals[part].get(name, Decimal(0)) + v
                elif v > totals[part].get(name, Decimal(0)):
                    totals[part][name] = v
    out: dict[str, Decimal] = {}
    for name, v in totals["requests"].items():
        out[f"requests.{name}"] = v
        if name in _COMPUTE:
            out[name] = v
    for name, v in totals["limits"].items():
        out[f"limits.{name}"] = v
    return out


def _amounts(containers: Any, part: str) -> list[tuple[str, Decimal]]:
    """(resource, amount) of every container's `part` (requests or limits); junk skipped."""
    out: list[tuple[str, Decimal]] = []
    if not isinstance(containers, list):
        return out
    for c in containers:
        resources = c.get("resources") if isinstance(c, dict) else None
        entries = resources.get(part) if isinstance(resources, dict) else None
        if not isinstance(entries, dict):
            continue
        for name, raw in entries.items():
            v = quantity_value(raw)
            if v is not None:
                out.append((str(name), v))
    return out


def _object_usage(gr: str, obj: dict[str, Any], hard: Iterable[str]) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    if gr == "pods" and not _active(obj):
        return out
    for name in hard:
        if _count_gr(name) == gr:
            out[name] = Decimal(1)
    if gr == "services":
        spec = field_dict(obj, "spec")
        kind = spec.get("type")
        ports = field_list(spec, "ports")
        if kind == "NodePort" or kind == "LoadBalancer":
            out["services.nodeports"] = Decimal(len(ports))
        if kind == "LoadBalancer":
            out["services.loadbalancers"] = Decimal(1)
    if gr == "pods":
        out.update(pod_usage(obj))
    return out


_COMPUTE_NAMES = ("cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu",
                  "limits.memory")


def _best_effort(pod: dict[str, Any]) -> bool:
    """QoS class BestEffort: no container asks for or limits cpu or memory."""
    spec = field_dict(pod, "spec")
    for key in ("containers", "initContainers"):
        for part in ("requests", "limits"):
            if any(name in ("cpu", "memory") for name, _ in _amounts(spec.get(key), part)):
                return False
    return True


def _terminating(pod: dict[str, Any]) -> bool:
    spec = field_dict(pod, "spec")
    return spec.get("activeDeadlineSeconds") is not None


_SCOPES = {
    "Terminating": _terminating,
    "NotTerminating": lambda pod: not _terminating(pod),
    "BestEffort": _best_effort,
    "NotBestEffort": lambda pod: not _best_effort(pod),
}


def _scope_terms(quota: dict[str, Any]) -> list[tuple[str, str, list[str]]]:
    """(scopeName, operator, values) of `spec.scopes` and `spec.scopeSelector`."""
    spec = field_dict(quota, "spec")
    terms: list[tuple[str, str, list[str]]] = [
        (str(name), "Exists", []) for name in spec.get("scopes") or []]
    selector = field_dict(spec, "scopeSelector")
    for expr in selector.get("matchExpressions") or []:
        if isinstance(expr, dict):
            terms.append((str(expr.get("scopeName")), str(expr.get("operator") or "Exists"),
                          [str(v) for v in expr.get("values") or []]))
    return terms


def in_scope(quota: dict[str, Any], gr: str, obj: dict[str, Any]) -> bool:
    """Whether a scoped quota tracks the object: scopes select pods only (Terminating:
    `activeDeadlineSeconds` set; BestEffort: no cpu/memory requests or limits; and their
    negations; PriorityClass by `spec.priorityClassName`), every term must hold."""
    terms = _scope_terms(quota)
    if not terms:
        return True
    if gr != "pods":
        return False
    for name, operator, values in terms:
        if name == "PriorityClass":
            spec = field_dict(obj, "spec")
            cls = spec.get("priorityClassName")
            ok = {"In": cls in values, "NotIn": cls not in values, "Exists": cls is not None,
                  "DoesNotExist": cls is None}.get(operator, False)
        else:
            check = _SCOPES.get(name)
            ok = check is not None and (check(obj) if operator != "DoesNotExist"
                                        else not check(obj))
        if not ok:
            return False
    return True


def _tracked(quota: dict[str, Any], hard: dict[str, Any]) -> dict[str, Any]:
    """The names a quota tracks: a BestEffort quota tracks only the pod count."""
    if any(name == "BestEffort" for name, _, _ in _scope_terms(quota)):
        return {k: v for k, v in hard.items() if k not in _COMPUTE_NAMES}
    return hard


def usage(quota: dict[str, Any], objects: Lister) -> dict[str, Decimal]:
    hard = _tracked(quota, hard_of(quota))
    used = {name: Decimal(0) for name in hard}
    for gr in counted_grs(hard):
        for obj in objects(gr):
            if not in_scope(quota, gr, obj):
                continue
            for name, v in _object_usage(gr, obj, hard).items():
                if name in used:
                    used[name] += v
    return used


def render(value: Decimal) -> str:
    if value == value.to_integral_value():
        return str(int(value))
    milli = (value * 1000).to_integral_value(rounding="ROUND_CEILING")
    return f"{int(milli)}m"


def hard_of(quota: dict[str, Any]) -> dict[str, Any]:
    spec = quota.get("spec")
    hard = spec.get("hard") if isinstance(spec, dict) else None
    return dict(hard) if isinstance(hard, dict) else {}


def status(quota: dict[str, Any], objects: Lister) -> dict[str, Any]:
    hard = hard_of(quota)
    used = usage(quota, objects)
    return {"hard": hard, "used": {k: render(v) for k, v in used.items()}}


def admit(gr: str, obj: dict[str, Any], quotas: list[dict[str, Any]],
          objects: Lister) -> None:
    """Refuse (403) a new object that would take a namespace past one of its quotas."""
    for quota in quotas:
        hard = _tracked(quota, hard_of(quota))
        if gr not in counted_grs(hard) or not in_scope(quota, gr, obj):
            continue
        wanted = _object_usage(gr, obj, hard)
        if gr == "pods" and _active(obj):
            missing = [n for n in hard if n in ("requests.cpu", "requests.memory", "cpu",
                                                "memory", "limits.cpu", "limits.memory")
                       and n not in wanted]
            if missing:
                names = ",".join(sorted(missing))
                raise ApiError(403, f'pods "{obj["metadata"]["name"]}" is forbidden: failed '
                                    f"quota: {quota['metadata']['name']}: must specify {names}",
                               "Forbidden", {"name": obj["metadata"]["name"], "kind": "pods"})
        used = usage(quota, objects)
        over = []
        for name, v in wanted.items():
            limit = quantity_value(hard.get(name)) if name in hard else None
            if limit is not None and used[name] + v > limit:
                over.append(name)
        if over:
            over.sort()
            req = ",".join(f"{n}={render(wanted[n])}" for n in over)
            use = ",".join(f"{n}={render(used[n])}" for n in over)
            lim = ",".join(f"{n}={hard[n]}" for n in over)
            kind = gr.rsplit("/", 1)[-1]
            name = obj["metadata"].get("name", "")
            raise ApiError(403, f'{kind} "{name}" is forbidden: exceeded quota: '
                                f"{quota['metadata']['name']}, requested: {req}, used: {use}, "
                                f"limited: {lim}", "Forbidden", {"name": name, "kind": kind})


def validate(obj: dict[str, Any], _old: dict[str, Any] | None) -> list[Cause]:
    """spec.hard: a map of quantities >= 0."""
    spec = obj.get("spec")
    if spec is None:
        return []
    if not isinstance(spec, dict):
        return [Cause("spec", "must be an object", "FieldValueTypeInvalid")]
    hard = spec.get("hard")
    if hard is None:
        return []
    if not isinstance(hard, dict):
        return [Cause("spec.hard", "must be a map of quantities", "FieldValueTypeInvalid")]
    causes = []
    for name, raw in hard.items():
        value = quantity_value(raw)
        if value is None or value < 0:
            causes.append(Cause(f"spec.hard[{name}]", f'Invalid value: "{raw}": must be a '
                                                      "quantity greater than or equal to 0"))
    return causes
