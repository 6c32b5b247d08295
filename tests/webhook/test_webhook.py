"""The GPU-fraction webhook over real HTTPS: AdmissionReview v1 in, a JSONPatch out, checked
against the self-signed certificate the webhook made (as the API server checks it against
the configuration's caBundle)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import pytest

from gpushare.api.kubelet_share import MPS_VOLUME, SHARE_CONFIGMAP_ANNOTATION
from gpushare.webhook.review import ReviewError, review_response
from gpushare.webhook.server import WebhookServer, self_signed


def _review(obj: Any, operation: str = "CREATE", resource: str = "pods") -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "r-1", "operation": operation, "object": obj,
                        "resource": {"group": "", "version": "v1", "resource": resource}}}


def _pod(annotations: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "annotations": annotations},
            "spec": {"containers": [{"name": "c", "image": "x"}]}}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    cert, key = self_signed(tmp_path / "pki", ["localhost"])
    server = WebhookServer("127.0.0.1", 0, cert, key)
    server.start()
    yield f"https://localhost:{server.port}", cert
    server.stop()


def test_fractional_pod_is_patched_over_https(served: tuple[str, Path]) -> None:
    url, ca = served
    pod = _pod({"gpu-fraction": "0.25"})
    answer = httpx.post(f"{url}/mutate-pods", json=_review(pod), verify=str(ca)).json()
    response = answer["response"]
    assert (answer["kind"], response["uid"], response["allowed"]) == (
        "AdmissionReview", "r-1", True)
    assert response["patchType"] == "JSONPatch"
    out = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    assert out["metadata"]["annotations"][SHARE_CONFIGMAP_ANNOTATION] == "p-gpu-share"
    assert out["spec"]["volumes"][0]["name"] == MPS_VOLUME


def test_other_requests_are_allowed_unchanged_and_bad_ones_refused(
        served: tuple[str, Path]) -> None:
    url, ca = served
    plain = httpx.post(f"{url}/mutate-pods", json=_review(_pod({})), verify=str(ca)).json()
    assert plain["response"] == {"uid": "r-1", "allowed": True}
    bad = httpx.post(f"{url}/mutate-pods", json=_review(_pod({"gpu-fraction": "2"})),
                     verify=str(ca)).json()["response"]
    assert bad["allowed"] is False and "gpu-fraction" in bad["status"]["message"]
    garbage = httpx.post(f"{url}/mutate-pods", content=b"{", verify=str(ca),
                         headers={"Content-Type": "application/json"})
    assert garbage.status_code == 400


def test_certificate_of_another_ca_is_refused(served: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = served
    other, _ = self_signed(tmp_path / "other", ["localhost"])
    with pytest.raises(httpx.ConnectError):
        httpx.post(f"{url}/mutate-pods", json=_review(_pod({})), verify=str(other))


def test_updates_and_other_resources_pass_untouched() -> None:
    pod = _pod({"gpu-fraction": "0.5"})
    assert "patch" not in review_response(_review(pod, operation="UPDATE"))["response"]
    assert "patch" not in review_response(_review(pod, resource="configmaps"))["response"]


def test_not_a_review_names_the_field() -> None:
    with pytest.raises(ReviewError, match=r"request\.uid"):
        review_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                         "request": {}})
