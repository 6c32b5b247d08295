"""Which kubeconfig a command talks to (``--kubeconfig``, ``$KUBECONFIG``, ~/.kube/config,
or the pod's ServiceAccount)."""

from __future__ import annotations

import os
from pathlib import Path

import typer


def kubeconfig_path(kubeconfig: str | None) -> str:
    """The kubeconfig to use; ``""`` (the pod's ServiceAccount) when none is given or found
    inside a pod."""
    default = Path.home() / ".kube" / "config"
    if not kubeconfig and not os.environ.get("KUBECONFIG") and not default.is_file() and (
        os.environ.get("KUBERNETES_SERVICE_HOST")
    ):
        return ""
    path = kubeconfig or os.environ.get("KUBECONFIG") or str(default)
    if not Path(path).is_file():
        raise typer.BadParameter(f"{path}: no such kubeconfig", param_hint="--kubeconfig")
    return path
