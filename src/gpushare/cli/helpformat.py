"""How ``gpushare ... --help`` looks: Markdown help text (so ``code`` in docstrings shows
as code, not as backticks) and option names that are never cut.

Typer lays a command's options out as a rich table whose columns are all allowed to
shrink; in a narrow terminal a long name (``--leader-elect-resource-namespace``) was
shrunk with the help text and shown as ``--leader-elect-resource-na…``. Typer has no
setting for that table's columns, so its table class is given one: every column but the
last (the help text) keeps its width, and only the help text wraps, folding a word too
long for its column rather than cutting it.
"""

from __future__ import annotations

from typing import Any, Literal

import typer.rich_utils
from rich.columns import Columns
from rich.console import Group
from rich.table import Table

MARKUP: Literal["markdown"] = "markdown"


class _HelpTable(Table):
    """A table whose columns before the last never shrink (the names, the types)."""

    def add_row(self, *renderables: Any, **kwargs: Any) -> None:
        if renderables and isinstance(renderables[-1], Columns):
            # the help text and its "[default: ...]" one under the other, each folding
            # a word too long for the column instead of cutting it
            renderables = (*renderables[:-1], Group(*renderables[-1].renderables))
        super().add_row(*renderables, **kwargs)
        for column in self.columns[:-1]:
            column.no_wrap = True
        for column in self.columns:
            column.overflow = "fold"


def install() -> None:
    """Use the table above for typer's help panels."""
    typer.rich_utils.Table = _HelpTable  # type: ignore[attr-defined,misc]
