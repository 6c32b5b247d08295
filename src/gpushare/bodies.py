"""Typed reads of raw Kubernetes objects (the JSON dicts the API server stores and the
clients pass around), for code that must not trust their shape: a field that is missing
or of the wrong type reads as empty instead of raising."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def field_dict(obj: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``obj[key]`` when it is an object, else ``{}``."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def field_list(obj: Mapping[str, Any], key: str) -> list[Any]:
    """``obj[key]`` when it is a list, else ``[]``."""
    value = obj.get(key)
    return value if isinstance(value, list) else []


#: The fields of a Node's ``status.nodeInfo`` (NodeSystemInfo) that Kubernetes' schema
#: requires: typed clients (the official Python client among them) refuse a Node whose
#: nodeInfo lacks any of them.
NODE_INFO_REQUIRED = ("machineID", "systemUUID", "bootID", "kernelVersion", "osImage",
                      "containerRuntimeVersion", "kubeletVersion", "kubeProxyVersion",
                      "operatingSystem", "architecture")


def complete_node_info(info: Mapping[str, Any] | None) -> dict[str, Any]:
    """``info`` with every required NodeSystemInfo field present (an empty string where
    the node did not say, as a kubelet reports what it cannot tell)."""
    done = dict(info) if isinstance(info, Mapping) else {}
    for key in NODE_INFO_REQUIRED:
        if not isinstance(done.get(key), str):
            done[key] = ""
    return done


def selector_matches(selector: Any, labels: dict[str, str]) -> bool:
    """Whether a LabelSelector (matchLabels, matchExpressions) selects `labels`: a missing
    one selects nothing, an empty one everything (a policy/v1 PodDisruptionBudget's)."""
    if not isinstance(selector, dict):
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op = expr.get("key"), expr.get("operator")
        values = expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True
