"""Attacks on the tenant boundary, run against real processes: `gpushare up` (API server,
controllers with the syncers, a node agent), tenants made with the CLI, kubectl and the
Kubernetes client with the attacker's own credentials."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tenancy"))

from tenancy_support import KUBECTL, Platform, start_platform


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    assert shutil.which(KUBECTL), f"the attacks drive the cluster with {KUBECTL}"
    running = start_platform(tmp_path_factory.mktemp("security") / "data")
    yield running
    running.stop()
