"""The agent's few calls to the Kubernetes API, through the official client, as plain dicts.

The generated models are skipped (`_preload_content=False`): the agent reads and writes
only a handful of fields, and dicts keep unknown fields (annotations, status) intact.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

MERGE_PATCH = "application/merge-patch+json"


def api_client_from_kubeconfig(path: str) -> client.ApiClient:
    return config.new_client_from_config(config_file=path)


def _json(response: Any) -> dict[str, Any]:
    data = response.data if hasattr(response, "data") else response.read()
    return json.loads(data) if data else {}


class Kube:
    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)

    # --- nodes --------------------------------------------------------------------

    def get_node(self, name: str) -> dict[str, Any] | None:
        try:
            return _json(self.core.read_node(name, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def create_node(self, body: dict[str, Any]) -> dict[str, Any]:
        return _json(self.core.create_node(body, _preload_content=False))

    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return _json(
            self.core.patch_node(name, patch, _content_type=MERGE_PATCH, _preload_content=False)
        )

    def patch_node_status(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return _json(
            self.core.patch_node_status(
                name, patch, _content_type=MERGE_PATCH, _preload_content=False
            )
        )

    def list_nodes(self) -> list[dict[str, Any]]:
        return list(_json(self.core.list_node(_preload_content=False)).get("items") or [])

    # --- leases ---------------------------------------------------------------------

    def renew_lease(self, name: str, holder: str, duration_s: int, now_micro: str) -> bool:
        """Create or renew `kube-node-lease/<node>`; False when the API has no leases."""
        ns = "kube-node-lease"
        try:
            self.coordination.patch_namespaced_lease(
                name,
                ns,
                {"spec": {"holderIdentity": holder, "renewTime": now_micro}},
                _content_type=MERGE_PATCH,
                _preload_content=False,
            )
            return True
        except ApiException as exc:
            if exc.status != 404:
                return False
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": duration_s,
                "renewTime": now_micro,
            },
        }
        try:
            self.coordination.create_namespaced_lease(ns, body, _preload_content=False)
            return True
        except ApiException as exc:
            if exc.status == 404:  # the namespace may be missing: make it once
                try:
                    self.core.create_namespace({"metadata": {"name": ns}}, _preload_content=False)
                    self.coordination.create_namespaced_lease(ns, body, _preload_content=False)
                    return True
                except ApiException:
                    return False
            return False

    def get_lease(self, name: str) -> dict[str, Any] | None:
        try:
            return _json(
                self.coordination.read_namespaced_lease(
                    name, "kube-node-lease", _preload_content=False
                )
            )
        except ApiException:
            return None

    # --- pods -----------------------------------------------------------------------

    def list_pods_on(self, node: str) -> tuple[list[dict[str, Any]], str]:
        body = _json(
            self.core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node}", _preload_content=False
            )
        )
        return list(body.get("items") or []), str(
            (body.get("metadata") or {}).get("resourceVersion") or ""
        )

    def watch_pods_on(
        self, node: str, resource_version: str, timeout_s: int
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Raw watch events; the caller re-lists on 410 Gone or a broken stream."""
        response = self.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node}",
            watch=True,
            resource_version=resource_version or None,
            timeout_seconds=timeout_s,
            allow_watch_bookmarks=True,
            _preload_content=False,
            _request_timeout=timeout_s + 15,
        )
        try:
            buffer = b""
            for chunk in response.stream(4096, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        event = json.loads(line)
                        yield str(event.get("type")), event.get("object") or {}
            if buffer.strip():
                event = json.loads(buffer)
                yield str(event.get("type")), event.get("object") or {}
        finally:
            response.release_conn()

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return _json(self.core.read_namespaced_pod(name, namespace, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def patch_pod_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.core.patch_namespaced_pod_status(
            name,
            namespace,
            {"status": status},
            _content_type=MERGE_PATCH,
            _preload_content=False,
        )

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: dict[str, str | None]
    ) -> None:
        self.core.patch_namespaced_pod(
            name,
            namespace,
            {"metadata": {"annotations": annotations}},
            _content_type=MERGE_PATCH,
            _preload_content=False,
        )

    def delete_pod_now(self, namespace: str, name: str, uid: str) -> None:
        """Finish a graceful deletion once the processes are gone (the kubelet's last step)."""
        body = (
            {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
            if uid
            else {"gracePeriodSeconds": 0}
        )
        try:
            self.core.delete_namespaced_pod(
                name, namespace, body=body, grace_period_seconds=0, _preload_content=False
            )
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise

    # --- configmaps, secrets, events -----------------------------------------------

    def config_map_data(self, namespace: str, name: str) -> dict[str, str] | None:
        try:
            body = _json(
                self.core.read_namespaced_config_map(name, namespace, _preload_content=False)
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(body.get("data") or {})

    def secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return _json(self.core.read_namespaced_secret(name, namespace, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def create_event(self, body: dict[str, Any]) -> None:
        namespace = body["metadata"]["namespace"]
        self.core.create_namespaced_event(namespace, body, _preload_content=False)
