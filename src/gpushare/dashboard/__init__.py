"""The web dashboard the control plane serves at ``/dashboard``.

Plain ES modules and a stylesheet, shipped as package data and served as files: nothing to
build, no Node toolchain. The page holds no data of its own: it logs in with a kubeconfig
token and reads everything through the Kubernetes API with that token (list, then watch),
so what a user sees is what their RBAC allows.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from starlette.exceptions import HTTPException
from starlette.responses import Response

from gpushare.api.plugins import ServerApi, ServerPlugin

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
# Served files are only these: no path from the request reaches the file system.
_FILES = ("index.html", "app.js", "api.js", "model.js", "render.js", "style.css")
_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
}


@cache
def _load(name: str) -> bytes:
    return (resources.files(__package__) / "static" / name).read_bytes()


def dashboard_response(path: str) -> Response:
    """``/dashboard`` (the page) or ``/dashboard/<file>``."""
    name = path[len("/dashboard"):].lstrip("/") or "index.html"
    if name not in _FILES:
        raise HTTPException(404, "the server could not find the requested resource")
    suffix = name[name.rfind("."):]
    return Response(_load(name), 200, media_type=_TYPES[suffix], headers=_HEADERS)


def server_plugin(_api: ServerApi) -> ServerPlugin:
    """The API server's ``/dashboard``: static files only, served without a token; the
    page reads everything through the API with the user's token."""
    return ServerPlugin("dashboard", mounts={"/dashboard": dashboard_response})
