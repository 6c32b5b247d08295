"""API errors rendered as Kubernetes `Status` objects."""

from __future__ import annotations

# `ApiError` and `invalid` live with the shared vocabulary (`gpushare.api.status`), where
# the parts that plug into the server raise them too; the server's other errors are here.
from gpushare.api.shapes import Cause
from gpushare.api.status import ApiError, invalid, status_details

__all__ = ["ApiError", "Cause", "already_exists", "bad_request", "conflict", "forbidden", "gone",
           "invalid", "not_found"]


def _qualified(group: str, resource: str) -> str:
    return f"{resource}.{group}" if group else resource


def not_found(group: str, resource: str, name: str) -> ApiError:
    return ApiError(
        404,
        f'{_qualified(group, resource)} "{name}" not found',
        "NotFound",
        status_details(group, resource, name),
    )


def already_exists(group: str, resource: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'{_qualified(group, resource)} "{name}" already exists',
        "AlreadyExists",
        status_details(group, resource, name),
    )


def conflict(group: str, resource: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {_qualified(group, resource)} "{name}": {why}',
        "Conflict",
        status_details(group, resource, name),
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, "BadRequest")


def forbidden(user: str, verb: str, group: str, resource: str, name: str, ns: str) -> ApiError:
    scope = f' in the namespace "{ns}"' if ns else " at the cluster scope"
    target = f' "{name}"' if name else ""
    message = (
        f'{resource}{target} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
        f'in API group "{group}"{scope}'
    )
    return ApiError(403, message, "Forbidden", status_details(group, resource, name))


def gone(message: str) -> ApiError:
    return ApiError(410, message, "Expired")
