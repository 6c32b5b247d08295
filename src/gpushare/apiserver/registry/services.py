"""Service defaults and allocations, as Kubernetes' service registry makes them: a cluster
IP from 10.96.0.0/12 (the `kubernetes` Service gets the first, 10.96.0.1), node ports from
30000-32767 for NodePort and LoadBalancer Services, and the defaulted policy fields.
A node agent with an isolated pod network DNATs each ClusterIP port to the Service's ready
endpoints (agent/runtime/network)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from gpushare.api.contracts import API_SERVICE_IP
from gpushare.api.objects import field_dict, field_list
from gpushare.apiserver.errors import Cause

_RANGE = ipaddress.ip_network("10.96.0.0/12")

_NODE_PORTS = range(30000, 32768)


def _in_use(services: Iterable[dict[str, Any]]) -> tuple[set[str], set[int]]:
    ips: set[str] = set()
    ports: set[int] = set()
    for svc in services:
        spec = field_dict(svc, "spec")
        if isinstance(spec.get("clusterIP"), str):
            ips.add(spec["clusterIP"])
        for p in spec.get("ports") or ():
            if isinstance(p, dict) and isinstance(p.get("nodePort"), int):
                ports.add(p["nodePort"])
    return ips, ports


def allocate(obj: dict[str, Any], old: dict[str, Any] | None,
             services: Iterable[dict[str, Any]]) -> list[Cause]:
    """Fill in a Service's defaults and allocations (keeping an existing Service's)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return []
    old_spec = field_dict(old or {}, "spec")
    kind = spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    ports = field_list(spec, "ports")
    for p in ports:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
            if "targetPort" not in p and "port" in p:
                p["targetPort"] = p["port"]
    if kind == "ExternalName":
        return []
    spec.setdefault("internalTrafficPolicy", "Cluster")
    ips, node_ports = _in_use(s for s in services if s is not old)
    if old_spec.get("clusterIP") and not spec.get("clusterIP"):
        spec["clusterIP"] = old_spec["clusterIP"]
    if old_spec.get("clusterIP") and spec.get("clusterIP") != old_spec["clusterIP"]:
        return [Cause("spec.clusterIP", "Invalid value: field is immutable",
                      "FieldValueInvalid")]
    if not spec.get("clusterIP"):
        first = obj["metadata"].get("name") == "kubernetes" and obj["metadata"].get(
            "namespace") == "default"
        for address in _RANGE.hosts():
            text = str(address)
            if text not in ips and (first or text != API_SERVICE_IP):
                spec["clusterIP"] = text
                break
        else:
            return [Cause("spec.clusterIP", "Internal error: no cluster IP left",
                          "FieldValueInvalid")]
    elif spec["clusterIP"] != "None" and (not old_spec.get("clusterIP")):
        try:
            if ipaddress.ip_address(spec["clusterIP"]) not in _RANGE:
                return [Cause("spec.clusterIP", f'Invalid value: "{spec["clusterIP"]}": '
                                                 "provided IP is not in the valid range")]
        except ValueError:
            return [Cause("spec.clusterIP", f'Invalid value: "{spec["clusterIP"]}": must be '
                                             'a valid IP address or "None"')]
        if spec["clusterIP"] in ips:
            return [Cause("spec.clusterIP", f'Invalid value: "{spec["clusterIP"]}": provided '
                                             "IP is already allocated")]
    spec.setdefault("clusterIPs", [spec["clusterIP"]])
    if spec["clusterIP"] != "None":
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
    if kind in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
        old_ports = {(p.get("port"), p.get("protocol", "TCP")): p.get("nodePort")
                     for p in old_spec.get("ports") or () if isinstance(p, dict)}
        for p in ports:
            if not isinstance(p, dict) or p.get("nodePort"):
                continue
            kept = old_ports.get((p.get("port"), p.get("protocol")))
            if kept:
                p["nodePort"] = kept
                continue
            free = next((n for n in _NODE_PORTS if n not in node_ports), None)
            if free is None:
                return [Cause("spec.ports", "Internal error: no node port left",
                              "FieldValueInvalid")]
            p["nodePort"] = free
            node_ports.add(free)
    return []
