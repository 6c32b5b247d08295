"""The control plane as the product runs it: the API server with the parts that plug into
it (tenancy's admission and policies, the dashboard). The API server imports none of them;
this is where they meet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpushare import dashboard
from gpushare.api.plugins import PluginFactory
from gpushare.apiserver.http.server import ApiServer
from gpushare.tenancy import admission as tenancy_admission


def server_plugins() -> list[PluginFactory]:
    """What the product plugs into its API server, in order."""
    return [tenancy_admission.server_plugin, dashboard.server_plugin]


def api_server(data_dir: Path | str, *args: Any, **kwargs: Any) -> ApiServer:
    """`ApiServer(data_dir, ...)` with the product's plug-ins."""
    return ApiServer(data_dir, *args, plugins=server_plugins(), **kwargs)
