"""The live scheduler's configuration file: the scenario format's ``actions`` and
``config`` keys, so that what a scenario shows is what the cluster does.

    actions: [allocate, reclaim, preempt]      # optional; the default order otherwise
    config:
      compat: kai
      placement: {gpu: spread, cpu: binpack}
      nodePools: {inference: {placement: {gpu: fgd}}}   # per node pool (kai.scheduler/node-pool)
      stalenessGracePeriodSeconds: 120
      reservation: {afterSeconds: 1800}   # reserve nodes for a gang waiting this long
"""

from __future__ import annotations

from pathlib import Path

import yaml

from gpushare.model.schema import ScenarioError, check_keys
from gpushare.scheduler.config import Config
from gpushare.scheduler.config_file import parse_actions, parse_config

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
        return parse_config(top.get("config"), parse_actions(top))
    except ScenarioError as error:
        raise SchedulerConfigError(f"{prefix}{error}") from None
