"""Which kubeconfig a ``gpushare`` command uses: one resolution for every command.

``--kubeconfig`` when given; else ``$KUBECONFIG`` (its first file that exists, as kubectl
reads a list); else, for commands that know the control plane's data directory (``gpushare
tenant ...``), that directory's ``admin.kubeconfig``; else ``~/.kube/config``; else, inside
a pod, the pod's ServiceAccount (``""``).
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

HELP = ("kubeconfig of the control plane (default: $KUBECONFIG, then ~/.kube/config)")
HELP_WITH_DATA_DIR = ("kubeconfig of the control plane (default: $KUBECONFIG, then "
                      "DATA_DIR/admin.kubeconfig, then ~/.kube/config)")


def kubeconfig_path(explicit: str | Path | None, data_dir: Path | None = None) -> str:
    """The kubeconfig path to use (``""``: the pod's ServiceAccount); a named file that does
    not exist is an error naming it."""
    if explicit:
        return _existing(str(explicit), "--kubeconfig")
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        found = next((p for p in listed if Path(p).is_file()), None)
        if found is None:
            raise typer.BadParameter(f"{listed[0]}: no such kubeconfig (from $KUBECONFIG)",
                                     param_hint="--kubeconfig")
        return found
    if data_dir is not None and (data_dir / "admin.kubeconfig").is_file():
        return str(data_dir / "admin.kubeconfig")
    default = Path.home() / ".kube" / "config"
    if default.is_file():
        return str(default)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return ""
    where = f"{data_dir / 'admin.kubeconfig'} or " if data_dir is not None else ""
    raise typer.BadParameter(f"no kubeconfig: {where}{default} does not exist; start the "
                             "control plane (gpushare up) or pass --kubeconfig",
                             param_hint="--kubeconfig")


def _existing(path: str, hint: str) -> str:
    if not Path(path).is_file():
        raise typer.BadParameter(f"{path}: no such kubeconfig", param_hint=hint)
    return path
