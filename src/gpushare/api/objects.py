"""Typed reads of raw Kubernetes objects (the JSON dicts the API server stores and the
clients pass around), for code that must not trust their shape: a field that is missing
or of the wrong type reads as empty instead of raising. `Obj` is the one name of such an
object; `Meta` is the typed view of its metadata."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: A raw API object, as JSON decodes it.
Obj = dict[str, Any]


def field_dict(obj: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``obj[key]`` when it is an object, else ``{}``."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def field_list(obj: Mapping[str, Any], key: str) -> list[Any]:
    """``obj[key]`` when it is a list, else ``[]``."""
    value = obj.get(key)
    return value if isinstance(value, list) else []


def controller_reference(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The owner that controls ``obj``: the controller=true reference, else the first."""
    refs = field_dict(obj, "metadata").get("ownerReferences") or []
    for ref in refs:
        if ref.get("controller"):
            return ref  # type: ignore[no-any-return]
    return refs[0] if refs else None  # type: ignore[no-any-return]


def metadata(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    """``obj["metadata"]`` when it is an object, else ``{}`` (also for no object at all)."""
    return field_dict(obj, "metadata") if obj else {}


@dataclass(frozen=True, slots=True)
class Meta:
    """The typed view of an object's metadata; ``raw`` is the metadata itself (writes to
    ``labels`` and ``annotations`` reach the object when it has them)."""

    raw: dict[str, Any]

    @classmethod
    def of(cls, obj: Mapping[str, Any] | None) -> Meta:
        return cls(metadata(obj))

    @property
    def name(self) -> str:
        return str(self.raw.get("name") or "")

    @property
    def namespace(self) -> str:
        return str(self.raw.get("namespace") or "")

    @property
    def uid(self) -> str:
        return str(self.raw.get("uid") or "")

    @property
    def labels(self) -> dict[str, str]:
        return field_dict(self.raw, "labels")

    @property
    def annotations(self) -> dict[str, str]:
        return field_dict(self.raw, "annotations")

    @property
    def owner_references(self) -> list[dict[str, Any]]:
        return [ref for ref in field_list(self.raw, "ownerReferences") if isinstance(ref, dict)]

    @property
    def deleting(self) -> bool:
        """Whether the object is being deleted (it has a deletionTimestamp)."""
        return bool(self.raw.get("deletionTimestamp"))

    @property
    def resource_version(self) -> str:
        return str(self.raw.get("resourceVersion") or "")

    @property
    def generation(self) -> int:
        """``metadata.generation``, 0 when missing or not an integer."""
        value = self.raw.get("generation")
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    @property
    def creation_timestamp(self) -> str:
        """The RFC 3339 text of ``metadata.creationTimestamp``, "" when missing."""
        return str(self.raw.get("creationTimestamp") or "")

    @property
    def deletion_grace_seconds(self) -> int | None:
        """``metadata.deletionGracePeriodSeconds``: None when not set (or not an integer)."""
        value = self.raw.get("deletionGracePeriodSeconds")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def finalizers(self) -> list[str]:
        return [f for f in field_list(self.raw, "finalizers") if isinstance(f, str)]


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
