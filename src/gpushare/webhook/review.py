"""AdmissionReview v1 in, AdmissionReview v1 out: the webhook's one decision, pure.

A pod asking for a GPU fraction is answered with the JSONPatch of
`gpushare.api.kubelet_share.mutation_patch`; any other object is allowed unchanged; a pod
whose GPU annotations cannot be read is refused with a message naming the annotation (a pod
that would run on a GPU share without its limits is worse than no pod)."""

from __future__ import annotations

import base64
import json
from typing import Any

from gpushare.api.gpu import GpuRequestError
from gpushare.api.kubelet_share import MPS_HOST_DIRECTORY, ShareConfigError, mutation_patch

API_VERSION = "admission.k8s.io/v1"


class ReviewError(ValueError):
    """A request body that is not an AdmissionReview v1; the message names the field."""


def _request(review: Any) -> dict[str, Any]:
    if not isinstance(review, dict):
        raise ReviewError("body: not a JSON object")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != "AdmissionReview":
        raise ReviewError(f"apiVersion/kind: expected {API_VERSION} AdmissionReview")
    request = review.get("request")
    if not isinstance(request, dict) or not request.get("uid"):
        raise ReviewError("request.uid: missing")
    return request


def review_response(review: Any, host_directory: str = MPS_HOST_DIRECTORY) -> dict[str, Any]:
    """The AdmissionReview answering ``review``; a ReviewError when it is not one."""
    request = _request(review)
    response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
    obj = request.get("object")
    resource = request.get("resource") or {}
    if (resource.get("group", ""), resource.get("resource")) == ("", "pods") and (
            isinstance(obj, dict) and request.get("operation") == "CREATE"):
        try:
            patch = mutation_patch(obj, host_directory)
        except (GpuRequestError, ShareConfigError) as error:
            response["allowed"] = False
            response["status"] = {"code": 400, "reason": "BadRequest", "message": str(error)}
        else:
            if patch:
                response["patchType"] = "JSONPatch"
                response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}
