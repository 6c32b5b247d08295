"""The live scheduler's configuration file."""

from __future__ import annotations

import pytest

from gpushare.controllers.scheduling.scheduler_config import (
    SchedulerConfigError,
    load_scheduler_config,
    scheduler_config,
)


def test_reads_actions_and_the_scenario_config_block(tmp_path):
    path = tmp_path / "scheduler.yaml"
    path.write_text("actions: [allocate, reclaim]\nconfig:\n  compat: kai\n"
                    "  placement: {gpu: spread}\n")
    config = load_scheduler_config(path)
    assert config.actions == ("allocate", "reclaim")
    assert config.kai and config.gpu_placement == "spread" and config.cpu_placement == "binpack"


def test_empty_file_is_the_default(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_scheduler_config(path).actions[0] == "allocate"


@pytest.mark.parametrize(("raw", "where"), [
    ({"config": {"placement": {"gpu": "everywhere"}}}, "config.placement.gpu"),
    ({"actions": ["allocate", "dance"]}, "actions[1]"),
    ({"config": {"bogus": 1}}, "config.bogus"),
    ({"configs": {}}, "configs"),
])
def test_errors_name_the_key(raw, where):
    with pytest.raises(SchedulerConfigError, match=rf"f\.yaml: {__import__('re').escape(where)}"):
        scheduler_config(raw, "f.yaml")
