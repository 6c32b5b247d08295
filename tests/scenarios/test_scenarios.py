"""Every scenario file under tests/scenarios runs through the simulator and matches its
``expect`` (one test per file)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pending_actions import PENDING_EVICTION_ACTIONS

from gpushare.model.schema import ScenarioError
from gpushare.simulator import load_file, run

HERE = Path(__file__).parent
#: Files the loader must refuse: ``x-error`` holds the error expected (a regex).
REFUSED = sorted(HERE.rglob("*.refused.yaml"))
FILES = sorted(p for p in HERE.rglob("*.yaml") if p not in REFUSED)


def _param(path: Path):
    rel = path.relative_to(HERE).as_posix()
    marks = []
    if rel in PENDING_EVICTION_ACTIONS:
        marks.append(pytest.mark.xfail(strict=False, reason="needs the eviction actions"))
    return pytest.param(path, id=rel, marks=marks)


@pytest.mark.parametrize("path", [_param(p) for p in FILES])
def test_scenario(path: Path) -> None:
    result = run(load_file(path))
    assert result.passed, "\n".join(result.mismatches)


@pytest.mark.parametrize("path", REFUSED, ids=lambda p: p.relative_to(HERE).as_posix())
def test_refused_scenario(path: Path) -> None:
    expected = yaml.safe_load(path.read_text())["x-error"]
    with pytest.raises(ScenarioError, match=expected):
        load_file(path)


def test_pending_list_names_existing_files() -> None:
    names = {p.relative_to(HERE).as_posix() for p in FILES}
    assert names >= PENDING_EVICTION_ACTIONS
