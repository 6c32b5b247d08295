"""The error every part of the product answers a request with, rendered as a Kubernetes
`Status`: the API server's own refusals and those of what plugs into it (admission,
request policies). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpushare.api.shapes import Cause

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}


@dataclass
class ApiError(Exception):
    """An error the API answers with; `status_body()` is what the client sees."""

    code: int
    message: str
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.reason:
            self.reason = _REASONS.get(self.code, "Unknown")
        super().__init__(self.message)

    def status_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details or self.reason == "NotFound":
            # kube-apiserver's 404 for a path it does not serve has empty details; clients
            # read them (kubectl debug tells "no ephemeralcontainers" from "no such pod").
            body["details"] = self.details
        return body


def status_details(group: str, kind: str, name: str) -> dict[str, Any]:
    """The `details` of a Status about one object."""
    d: dict[str, Any] = {"kind": kind}
    if name:
        d["name"] = name
    if group:
        d["group"] = group
    return d


def invalid(group: str, kind: str, name: str, causes: list[Cause]) -> ApiError:
    summary = ", ".join(f"{c.field}: {c.message}" for c in causes)
    qualified = f"{kind}.{group}" if group else kind
    details = status_details(group, kind, name)
    details["causes"] = [c.to_dict() for c in causes]
    return ApiError(422, f'{qualified} "{name}" is invalid: {summary}', "Invalid", details)
