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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """A failing test shows the end of its platform's `gpushare up` log (server, controllers
    with the syncers, agent), so a failure seen only once can still be read afterwards."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, Platform):
            log = value.data.parent / "up.log"
            if log.exists():
                tail = log.read_text(errors="replace").splitlines()[-150:]
                report.sections.append(("gpushare up log (last 150 lines)", "\n".join(tail)))
            # `gpushare up` says little itself: each part it runs logs to data/logs/<part>.log
            for part in sorted((value.data / "logs").glob("*.log")):
                tail = part.read_text(errors="replace").splitlines()[-80:]
                report.sections.append((f"{part.name} (last 80 lines)", "\n".join(tail)))
