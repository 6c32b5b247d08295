"""The `Table` rendering (meta.k8s.io/v1) that `kubectl get` asks for."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson

from gpushare.api.objects import field_dict
from gpushare.api.timefmt import parse_time
from gpushare.apiserver.resources import PrinterColumn, ResourceInfo

log = logging.getLogger(__name__)

Row = list[Any]


def human_duration(seconds: float) -> str:
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        rem = s % 60
        return f"{m}m{rem}s" if rem else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        rem = m % 60
        return f"{h}h{rem}m" if rem else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if h < 24 * 8:
        rem = h % 24
        return f"{d}d{rem}h" if rem else f"{d}d"
    if d < 365 * 2:
        return f"{d}d"
    y = d // 365
    if y < 8:
        rem = d % 365
        return f"{y}y{rem}d" if rem else f"{y}y"
    return f"{y}y"


def age(value: Any, now: datetime) -> str:
    t = parse_time(value)
    if t is None:
        return "<unknown>"
    return human_duration((now - t).total_seconds())


# -- JSONPath (the subset additionalPrinterColumns use) ------------------------------------------


def _split_path(path: str) -> list[str | int]:
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    if path.startswith("$"):
        path = path[1:]
    parts: list[str | int] = []
    cur = []
    i = 0
    while i < len(path):
        ch = path[i]
        if ch == "\\" and i + 1 < len(path):
            cur.append(path[i + 1])
            i += 2
            continue
        if ch == ".":
            if cur:
                parts.append("".join(cur))
                cur = []
        elif ch == "[":
            if cur:
                parts.append("".join(cur))
                cur = []
            end = path.index("]", i)
            inner = path[i + 1:end].strip("'\"")
            parts.append(int(inner) if inner.lstrip("-").isdigit() else inner)
            i = end
        else:
            cur.append(ch)
        i += 1
    if cur:
        parts.append("".join(cur))
    return parts


_PATH_CACHE: dict[str, list[str | int]] = {}


def jsonpath(obj: Any, path: str) -> Any:
    parts = _PATH_CACHE.get(path)
    if parts is None:
        parts = _split_path(path)
        _PATH_CACHE[path] = parts
    cur = obj
    for p in parts:
        if p == "*" and isinstance(cur, list):
            return cur
        if isinstance(p, int):
            if not isinstance(cur, list) or not -len(cur) <= p < len(cur):
                return None
            cur = cur[p]
        elif isinstance(cur, dict):
            cur = cur.get(p)
        else:
            return None
        if cur is None:
            return None
    return cur


def column_cell(col: PrinterColumn, obj: dict[str, Any], now: datetime) -> Any:
    value = jsonpath(obj, col.json_path)
    if value is None:
        return None
    if col.type == "date":
        # "Created At" columns print the timestamp itself, like Kubernetes; others an age.
        return value if col.name == "Created At" else age(value, now)
    if isinstance(value, list):
        return ",".join(str(v) if not isinstance(v, dict | list) else orjson.dumps(v).decode()
                        for v in value)
    if isinstance(value, dict):
        return orjson.dumps(value).decode()
    if col.type == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    if col.type == "string" and not isinstance(value, str):
        return str(value).lower() if isinstance(value, bool) else str(value)
    return value


# -- built-in kinds ------------------------------------------------------------------------------

ColumnDef = tuple[str, str, int]  # name, type, priority


def _pod_status(obj: dict[str, Any]) -> tuple[str, int, int, int]:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    total = len(spec.get("containers") or ())
    ready = 0
    restarts = 0
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for cs in status.get("initContainerStatuses") or ():
        restarts += int(cs.get("restartCount") or 0)
    for cs in status.get("containerStatuses") or ():
        restarts += int(cs.get("restartCount") or 0)
        state = cs.get("state") or {}
        if "waiting" in state and (state["waiting"] or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state:
            term = state["terminated"] or {}
            if term.get("reason"):
                reason = term["reason"]
            elif term.get("signal"):
                reason = f"Signal:{term['signal']}"
            else:
                reason = f"ExitCode:{term.get('exitCode', 0)}"
        elif cs.get("ready") and "running" in state:
            ready += 1
    if obj["metadata"].get("deletionTimestamp") and status.get("reason") != "NodeLost":
        reason = "Terminating"
    return reason, ready, total, restarts


def _pod_row(obj: dict[str, Any], now: datetime) -> Row:
    reason, ready, total, restarts = _pod_status(obj)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    gates = spec.get("readinessGates") or ()
    return [
        obj["metadata"]["name"], f"{ready}/{total}", reason, restarts,
        age(obj["metadata"].get("creationTimestamp"), now),
        status.get("podIP") or "<none>", spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        f"0/{len(gates)}" if gates else "<none>",
    ]


def _node_row(obj: dict[str, Any], now: datetime) -> Row:
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    state = "Unknown"
    for cond in status.get("conditions") or ():
        if cond.get("type") == "Ready":
            # as kubectl prints it: a lost heartbeat (Unknown) shows NotReady too
            state = "Ready" if cond.get("status") == "True" else "NotReady"
    if spec.get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = obj["metadata"].get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels
                   if k.startswith("node-role.kubernetes.io/") and "/" in k)
    info = status.get("nodeInfo") or {}
    addrs = {a.get("type"): a.get("address") for a in status.get("addresses") or ()}
    return [
        obj["metadata"]["name"], state, ",".join(r for r in roles if r) or "<none>",
        age(obj["metadata"].get("creationTimestamp"), now), info.get("kubeletVersion", ""),
        addrs.get("InternalIP") or "<none>", addrs.get("ExternalIP") or "<none>",
        info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


def _event_row(obj: dict[str, Any], now: datetime) -> Row:
    last = obj.get("lastTimestamp") or obj.get("eventTime") or obj["metadata"].get(
        "creationTimestamp")
    io = obj.get("involvedObject") or {}
    kind = (io.get("kind") or "").lower()
    return [
        age(last, now), obj.get("type") or "", obj.get("reason") or "",
        f"{kind}/{io.get('name', '')}", obj.get("message") or "",
        (obj.get("source") or {}).get("component") or obj.get("reportingComponent") or "",
        obj.get("count") or 1, obj["metadata"]["name"],
    ]


def _job_row(obj: dict[str, Any], now: datetime) -> Row:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    state = "Running"
    for cond in status.get("conditions") or ():
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed",
                                                                  "Suspended"):
            state = cond["type"]
    completions = spec.get("completions")
    done = status.get("succeeded") or 0
    start = parse_time(status.get("startTime"))
    end = parse_time(status.get("completionTime")) or now
    duration = human_duration((end - start).total_seconds()) if start else ""
    return [obj["metadata"]["name"], state,
            f"{done}/{completions}" if completions is not None else f"{done}/1 of 1",
            duration, age(obj["metadata"].get("creationTimestamp"), now)]


def _service_row(obj: dict[str, Any], now: datetime) -> Row:
    spec = field_dict(obj, "spec")
    status = field_dict(obj, "status")
    kind = str(spec.get("type") or "ClusterIP")
    external = [str(i.get("ip") or i.get("hostname") or "") for i in
                (status.get("loadBalancer") or {}).get("ingress") or () if isinstance(i, dict)]
    external += [str(i) for i in spec.get("externalIPs") or ()]
    if kind == "ExternalName":
        shown = str(spec.get("externalName") or "<none>")
    elif external:
        shown = ",".join(external)
    else:
        shown = "<pending>" if kind == "LoadBalancer" else "<none>"
    ports = []
    for p in spec.get("ports") or ():
        if not isinstance(p, dict):
            continue
        text = str(p.get("port", ""))
        if p.get("nodePort"):
            text += f":{p['nodePort']}"
        ports.append(f"{text}/{p.get('protocol') or 'TCP'}")
    selector = field_dict(spec, "selector")
    return [obj["metadata"]["name"], kind, str(spec.get("clusterIP") or "<none>"), shown,
            ",".join(ports) or "<none>", age(obj["metadata"].get("creationTimestamp"), now),
            ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>"]


def _deploy_row(obj: dict[str, Any], now: datetime) -> Row:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return [obj["metadata"]["name"],
            f"{status.get('readyReplicas') or 0}/{spec.get('replicas', 0)}",
            status.get("updatedReplicas") or 0, status.get("availableReplicas") or 0,
            age(obj["metadata"].get("creationTimestamp"), now)]


def _rs_row(obj: dict[str, Any], now: datetime) -> Row:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return [obj["metadata"]["name"], spec.get("replicas", 0), status.get("replicas") or 0,
            status.get("readyReplicas") or 0,
            age(obj["metadata"].get("creationTimestamp"), now)]


def _name_age(fields: Callable[[dict[str, Any]], list[Any]]) -> Callable[..., Row]:
    def row(obj: dict[str, Any], now: datetime) -> Row:
        return [obj["metadata"]["name"], *fields(obj),
                age(obj["metadata"].get("creationTimestamp"), now)]
    return row


def _binding_row(obj: dict[str, Any], now: datetime) -> Row:
    ref = obj.get("roleRef") or {}
    subjects = obj.get("subjects") or ()

    def names(kind: str) -> str:
        return ",".join(s.get("name", "") for s in subjects if s.get("kind") == kind)

    return [obj["metadata"]["name"], f"{ref.get('kind', '')}/{ref.get('name', '')}",
            age(obj["metadata"].get("creationTimestamp"), now), names("User"), names("Group"),
            ",".join(f"{s.get('namespace', '')}/{s.get('name', '')}" for s in subjects
                     if s.get("kind") == "ServiceAccount")]


def _containers_images(spec: dict[str, Any]) -> list[str]:
    containers = [c for c in spec.get("containers") or () if isinstance(c, dict)]
    return [",".join(str(c.get("name", "")) for c in containers),
            ",".join(str(c.get("image", "")) for c in containers)]


def _format_selector(selector: Any) -> str:
    """A LabelSelector as kubectl writes it (``app=web,tier in (a,b)``); ``<none>``."""
    if not isinstance(selector, dict):
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted(field_dict(selector, "matchLabels").items())]
    for expr in selector.get("matchExpressions") or ():
        if not isinstance(expr, dict):
            continue
        key, op = expr.get("key", ""), expr.get("operator", "")
        values = ",".join(sorted(str(v) for v in expr.get("values") or ()))
        if op == "Exists":
            parts.append(str(key))
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
        else:
            parts.append(f"{key} {'in' if op == 'In' else 'notin'} ({values})")
    return ",".join(parts) or "<none>"


def _more(items: list[str], count: int, limit: int = 3, empty: str = "<unset>") -> str:
    text = ",".join(items[:limit])
    if count > limit:
        return f"{text} + {count - limit} more..."
    return text or empty


def _cronjob_row(obj: dict[str, Any], now: datetime) -> Row:
    spec, status = field_dict(obj, "spec"), field_dict(obj, "status")
    job_spec = field_dict(field_dict(spec, "jobTemplate"), "spec")
    last = status.get("lastScheduleTime")
    return [obj["metadata"]["name"], spec.get("schedule", ""),
            spec.get("timeZone") or "<none>",
            "<unset>" if spec.get("suspend") is None else str(bool(spec["suspend"])),
            len(status.get("active") or ()), age(last, now) if last else "<none>",
            age(obj["metadata"].get("creationTimestamp"), now),
            *_containers_images(field_dict(field_dict(job_spec, "template"), "spec")),
            _format_selector(job_spec.get("selector"))]


def _statefulset_row(obj: dict[str, Any], now: datetime) -> Row:
    spec, status = field_dict(obj, "spec"), field_dict(obj, "status")
    return [obj["metadata"]["name"],
            f"{status.get('readyReplicas') or 0}/{spec.get('replicas', 0)}",
            age(obj["metadata"].get("creationTimestamp"), now),
            *_containers_images(field_dict(field_dict(spec, "template"), "spec"))]


def _daemonset_row(obj: dict[str, Any], now: datetime) -> Row:
    spec, status = field_dict(obj, "spec"), field_dict(obj, "status")
    pod_spec = field_dict(field_dict(spec, "template"), "spec")
    node_selector = field_dict(pod_spec, "nodeSelector")
    return [obj["metadata"]["name"], status.get("desiredNumberScheduled") or 0,
            status.get("currentNumberScheduled") or 0, status.get("numberReady") or 0,
            status.get("updatedNumberScheduled") or 0, status.get("numberAvailable") or 0,
            ",".join(f"{k}={v}" for k, v in sorted(node_selector.items())) or "<none>",
            age(obj["metadata"].get("creationTimestamp"), now),
            *_containers_images(pod_spec), _format_selector(spec.get("selector"))]


def _quota_row(obj: dict[str, Any], now: datetime) -> Row:
    hard = field_dict(field_dict(obj, "status"), "hard")
    used = field_dict(field_dict(obj, "status"), "used")
    requests: list[str] = []
    limits: list[str] = []
    for name in sorted(field_dict(field_dict(obj, "spec"), "hard")):
        text = f"{name}: {used.get(name, '0')}/{hard.get(name, '0')}"
        (limits if name.startswith("limits") else requests).append(text)
    return [obj["metadata"]["name"], age(obj["metadata"].get("creationTimestamp"), now),
            ", ".join(requests), ", ".join(limits)]


def _pdb_row(obj: dict[str, Any], now: datetime) -> Row:
    spec, status = field_dict(obj, "spec"), field_dict(obj, "status")
    low, high = spec.get("minAvailable"), spec.get("maxUnavailable")
    return [obj["metadata"]["name"], "N/A" if low is None else str(low),
            "N/A" if high is None else str(high), status.get("disruptionsAllowed") or 0,
            age(obj["metadata"].get("creationTimestamp"), now)]


def _ingress_row(obj: dict[str, Any], now: datetime) -> Row:
    spec = field_dict(obj, "spec")
    rules = [r for r in spec.get("rules") or () if isinstance(r, dict)]
    hosts = [str(r["host"]) for r in rules[:3] if r.get("host")]
    shown = ",".join(hosts) or "*"
    if len(rules) > 3:
        shown = f"{shown} + {len(rules) - 3} more..."
    lb = field_dict(field_dict(obj, "status"), "loadBalancer")
    address = ",".join(str(i.get("ip") or i.get("hostname") or "")
                       for i in lb.get("ingress") or () if isinstance(i, dict))
    return [obj["metadata"]["name"], spec.get("ingressClassName") or "<none>", shown, address,
            "80, 443" if spec.get("tls") else "80",
            age(obj["metadata"].get("creationTimestamp"), now)]


def _endpoints_row(obj: dict[str, Any], now: datetime) -> Row:
    subsets = [s for s in obj.get("subsets") or () if isinstance(s, dict)]
    shown: list[str] = []
    count = 0
    for subset in subsets:
        ips = [str(a.get("ip", "")) for a in subset.get("addresses") or ()
               if isinstance(a, dict)]
        ports = [p for p in subset.get("ports") or () if isinstance(p, dict)]
        if not ports:
            count += len(ips)
            shown += ips
            continue
        for port in ports:
            count += len(ips)
            shown += [f"[{ip}]:{port.get('port')}" if ":" in ip else f"{ip}:{port.get('port')}"
                      for ip in ips]
    text = _more(shown, count, empty="") if subsets else "<none>"
    return [obj["metadata"]["name"], text, age(obj["metadata"].get("creationTimestamp"), now)]


def _endpointslice_row(obj: dict[str, Any], now: datetime) -> Row:
    ports = [p for p in obj.get("ports") or () if isinstance(p, dict)]
    port_names = [str(p["port"]) if p.get("port") is not None else str(p.get("name") or "*")
                  for p in ports]
    endpoints = [e for e in obj.get("endpoints") or () if isinstance(e, dict)]
    addresses = [str(a) for e in endpoints for a in e.get("addresses") or ()]
    return [obj["metadata"]["name"], obj.get("addressType", ""),
            _more(port_names, len(port_names)),
            _more(addresses, len(addresses)) if endpoints else "<unset>",
            age(obj["metadata"].get("creationTimestamp"), now)]


BUILTIN_TABLES: dict[str, tuple[list[ColumnDef], Callable[[dict[str, Any], datetime], Row]]] = {
    "pods": ([("Name", "string", 0), ("Ready", "string", 0), ("Status", "string", 0),
              ("Restarts", "string", 0), ("Age", "string", 0), ("IP", "string", 1),
              ("Node", "string", 1), ("Nominated Node", "string", 1),
              ("Readiness Gates", "string", 1)], _pod_row),
    "nodes": ([("Name", "string", 0), ("Status", "string", 0), ("Roles", "string", 0),
               ("Age", "string", 0), ("Version", "string", 0), ("Internal-IP", "string", 1),
               ("External-IP", "string", 1), ("OS-Image", "string", 1),
               ("Kernel-Version", "string", 1), ("Container-Runtime", "string", 1)], _node_row),
    "services": ([("Name", "string", 0), ("Type", "string", 0), ("Cluster-IP", "string", 0),
                  ("External-IP", "string", 0), ("Port(s)", "string", 0), ("Age", "string", 0),
                  ("Selector", "string", 1)], _service_row),
    "namespaces": ([("Name", "string", 0), ("Status", "string", 0), ("Age", "string", 0)],
                   _name_age(lambda o: [(o.get("status") or {}).get("phase", "")])),
    "events": ([("Last Seen", "string", 0), ("Type", "string", 0), ("Reason", "string", 0),
                ("Object", "string", 0), ("Message", "string", 0), ("Source", "string", 1),
                ("Count", "integer", 1), ("Name", "string", 1)], _event_row),
    "configmaps": ([("Name", "string", 0), ("Data", "integer", 0), ("Age", "string", 0)],
                   _name_age(lambda o: [len(o.get("data") or {}) + len(o.get("binaryData")
                                                                        or {})])),
    "secrets": ([("Name", "string", 0), ("Type", "string", 0), ("Data", "integer", 0),
                 ("Age", "string", 0)],
                _name_age(lambda o: [o.get("type", ""), len(o.get("data") or {})])),
    "serviceaccounts": ([("Name", "string", 0), ("Secrets", "integer", 0), ("Age", "string", 0)],
                        _name_age(lambda o: [len(o.get("secrets") or ())])),
    "scheduling.k8s.io/priorityclasses": (
        [("Name", "string", 0), ("Value", "integer", 0), ("Global-Default", "boolean", 0),
         ("Age", "string", 0), ("PreemptionPolicy", "string", 0)],
        lambda o, now: [o["metadata"]["name"], o.get("value", 0), bool(o.get("globalDefault")),
                        age(o["metadata"].get("creationTimestamp"), now),
                        o.get("preemptionPolicy", "")]),
    "coordination.k8s.io/leases": (
        [("Name", "string", 0), ("Holder", "string", 0), ("Age", "string", 0)],
        _name_age(lambda o: [(o.get("spec") or {}).get("holderIdentity", "")])),
    "batch/jobs": ([("Name", "string", 0), ("Status", "string", 0),
                    ("Completions", "string", 0), ("Duration", "string", 0),
                    ("Age", "string", 0)], _job_row),
    "apps/deployments": ([("Name", "string", 0), ("Ready", "string", 0),
                          ("Up-to-date", "integer", 0), ("Available", "integer", 0),
                          ("Age", "string", 0)], _deploy_row),
    "apps/replicasets": ([("Name", "string", 0), ("Desired", "integer", 0),
                          ("Current", "integer", 0), ("Ready", "integer", 0),
                          ("Age", "string", 0)], _rs_row),
    "batch/cronjobs": ([("Name", "string", 0), ("Schedule", "string", 0),
                        ("Timezone", "string", 0), ("Suspend", "boolean", 0),
                        ("Active", "integer", 0), ("Last Schedule", "string", 0),
                        ("Age", "string", 0), ("Containers", "string", 1),
                        ("Images", "string", 1), ("Selector", "string", 1)], _cronjob_row),
    "apps/statefulsets": ([("Name", "string", 0), ("Ready", "string", 0), ("Age", "string", 0),
                           ("Containers", "string", 1), ("Images", "string", 1)],
                          _statefulset_row),
    "apps/daemonsets": ([("Name", "string", 0), ("Desired", "integer", 0),
                         ("Current", "integer", 0), ("Ready", "integer", 0),
                         ("Up-to-date", "integer", 0), ("Available", "integer", 0),
                         ("Node Selector", "string", 0), ("Age", "string", 0),
                         ("Containers", "string", 1), ("Images", "string", 1),
                         ("Selector", "string", 1)], _daemonset_row),
    "resourcequotas": ([("Name", "string", 0), ("Age", "string", 0), ("Request", "string", 0),
                        ("Limit", "string", 0)], _quota_row),
    "policy/poddisruptionbudgets": ([("Name", "string", 0), ("Min Available", "string", 0),
                                     ("Max Unavailable", "string", 0),
                                     ("Allowed Disruptions", "integer", 0),
                                     ("Age", "string", 0)], _pdb_row),
    "networking.k8s.io/ingresses": ([("Name", "string", 0), ("Class", "string", 0),
                                     ("Hosts", "string", 0), ("Address", "string", 0),
                                     ("Ports", "string", 0), ("Age", "string", 0)],
                                    _ingress_row),
    "endpoints": ([("Name", "string", 0), ("Endpoints", "string", 0), ("Age", "string", 0)],
                  _endpoints_row),
    "discovery.k8s.io/endpointslices": ([("Name", "string", 0), ("AddressType", "string", 0),
                                         ("Ports", "string", 0), ("Endpoints", "string", 0),
                                         ("Age", "string", 0)], _endpointslice_row),
    "rbac.authorization.k8s.io/rolebindings": (
        [("Name", "string", 0), ("Role", "string", 0), ("Age", "string", 0),
         ("Users", "string", 1), ("Groups", "string", 1), ("ServiceAccounts", "string", 1)],
        _binding_row),
    "rbac.authorization.k8s.io/clusterrolebindings": (
        [("Name", "string", 0), ("Role", "string", 0), ("Age", "string", 0),
         ("Users", "string", 1), ("Groups", "string", 1), ("ServiceAccounts", "string", 1)],
        _binding_row),
}


def _column_defs(defs: list[ColumnDef]) -> list[dict[str, Any]]:
    return [{"name": n, "type": t, "format": "name" if n == "Name" else "", "description": n,
             "priority": p} for n, t, p in defs]


def table_columns(info: ResourceInfo) -> list[dict[str, Any]]:
    builtin = BUILTIN_TABLES.get(info.group_resource)
    if builtin is not None:
        return _column_defs(builtin[0])
    cols = [{"name": "Name", "type": "string", "format": "name",
             "description": "Name must be unique within a namespace.", "priority": 0}]
    if info.columns:
        for c in info.columns:
            ctype = "string" if c.type == "date" and c.name != "Created At" else c.type
            cols.append({"name": c.name, "type": ctype,
                         "format": c.format, "description": c.description or c.name,
                         "priority": c.priority})
    else:
        cols.append({"name": "Age", "type": "string", "format": "", "description": "Age",
                     "priority": 0})
    return cols


def table_cells(info: ResourceInfo, obj: dict[str, Any], now: datetime) -> Row:
    builtin = BUILTIN_TABLES.get(info.group_resource)
    if builtin is not None:
        return builtin[1](obj, now)
    cells: Row = [obj["metadata"]["name"]]
    if info.columns:
        cells.extend(column_cell(c, obj, now) for c in info.columns)
    else:
        cells.append(age(obj["metadata"].get("creationTimestamp"), now))
    return cells


def _unrenderable(info: ResourceInfo, obj: dict[str, Any]) -> Row:
    width = max(len(table_columns(info)), 1)
    return [obj["metadata"].get("name", ""), *(["<invalid>"] * (width - 1))]


def partial_metadata(obj: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": obj["metadata"]}


def to_table(
    info: ResourceInfo,
    objs: list[dict[str, Any]],
    include_object: str,
    list_meta: dict[str, Any],
    with_columns: bool = True,
) -> dict[str, Any]:
    now = datetime.now(UTC)
    rows = []
    for obj in objs:
        try:
            cells = table_cells(info, obj, now)
        except Exception:  # one malformed object must not fail everybody's `kubectl get`
            log.exception("table: %s %s/%s cannot be rendered", info.kind,
                          obj["metadata"].get("namespace") or "", obj["metadata"].get("name"))
            cells = _unrenderable(info, obj)
        row: dict[str, Any] = {"cells": cells}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = partial_metadata(obj)
        rows.append(row)
    table: dict[str, Any] = {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
                             "metadata": list_meta, "rows": rows}
    table["columnDefinitions"] = table_columns(info) if with_columns else []
    return table
