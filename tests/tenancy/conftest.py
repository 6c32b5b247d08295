"""Fixtures: one `gpushare up` with a declared L40S, shared by a module's tests."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from tenancy_support import KUBECTL, QUEUES, Platform, start_platform


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    assert shutil.which(KUBECTL), f"the tenancy tests drive the cluster with {KUBECTL}"
    root: Path = tmp_path_factory.mktemp("tenancy")
    running = start_platform(root / "data")
    running.host.apply(QUEUES % {"gpus": 1, "quota": 0.33})
    yield running
    running.stop()
