"""The live scheduler's configuration file: the scenario format's ``actions`` and
``config`` keys, so that what a scenario shows is what the cluster does.

    actions: [allocate, reclaim, preempt]      # optional; the default order otherwise
    config:
      compat: kai
      placement: {gpu: spread, cpu: binpack}
      stalenessGracePeriodSeconds: 120
"""

from __future__ import annotations

from pathlib import Path

import yaml

from gpushare.scheduler.config import DEFAULT_ACTIONS, Config
from gpushare.simulator.scenario import ACTION_NAMES
from gpushare.simulator.scenario import _config as scenario_config
from gpushare.simulator.schema import ScenarioError, as_list, as_str, check_keys, join

TOP_KEYS = frozenset({"actions", "config"})


class SchedulerConfigError(ValueError):
    """A configuration file that cannot be used; the message names the key's path."""


def load_scheduler_config(path: str | Path) -> Config:
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise SchedulerConfigError(f"{path}: {error}") from None
    return scheduler_config(raw if raw is not None else {}, str(path))


def scheduler_config(raw: object, source: str = "") -> Config:
    prefix = f"{source}: " if source else ""
    try:
        top = check_keys(raw, "", TOP_KEYS)
        actions = DEFAULT_ACTIONS
        if "actions" in top:
            actions = tuple(
                as_str(a, join("actions", i), ACTION_NAMES)
                for i, a in enumerate(as_list(top["actions"], "actions"))
            )
        return scenario_config(top.get("config"), actions)
    except ScenarioError as error:
        raise SchedulerConfigError(f"{prefix}{error}") from None
