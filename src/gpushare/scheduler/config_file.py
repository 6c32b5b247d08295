"""The scheduler's configuration as written in YAML: the ``actions`` list and the
``config`` block of the scenario format (``FORMAT.md``), shared by the scenario reader and
the live scheduler's configuration file, so that what a scenario shows is what the
cluster does. Errors are :class:`~gpushare.model.schema.ScenarioError` naming the key's
path.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from gpushare.model.schema import (
    ScenarioError,
    as_bool,
    as_int,
    as_list,
    as_number,
    as_str,
    check_keys,
    get,
    join,
)
from gpushare.scheduler.actions.common.options import CONFIG_KEYS as VICTIM_CONFIG_KEYS
from gpushare.scheduler.actions.common.options import OptionError
from gpushare.scheduler.actions.common.options import read_config as read_victim_config
from gpushare.scheduler.actions.registry import action_names
from gpushare.scheduler.config import DEFAULT_ACTIONS, Config
from gpushare.scheduler.nodeplacement import placement_strategy_names

CONFIG_KEYS = frozenset({
    "placement", "stalenessGracePeriodSeconds", "maxConsolidationPreemptees",
    "allowConsolidatingReclaim", "kValue", "compat",
}) | VICTIM_CONFIG_KEYS
ACTION_NAMES = action_names()


def parse_actions(top: Mapping[str, Any]) -> tuple[str, ...]:
    """The ``actions`` key of a document (the default order when absent)."""
    if "actions" not in top:
        return DEFAULT_ACTIONS
    return tuple(
        as_str(a, join("actions", i), ACTION_NAMES)
        for i, a in enumerate(as_list(top["actions"], "actions"))
    )


def parse_config(raw: Any, actions: tuple[str, ...] = DEFAULT_ACTIONS) -> Config:
    """The ``config`` block (``None``: every default), for the given ``actions``."""
    c = check_keys(raw, "config", CONFIG_KEYS)
    gpu_placement = cpu_placement = "binpack"
    if "placement" in c:
        p = check_keys(c["placement"], "config.placement", frozenset({"gpu", "cpu"}))
        gpu_placement = get(p, "gpu", "config.placement", as_str, default="binpack",
                            choices=placement_strategy_names())
        cpu_placement = get(p, "cpu", "config.placement", as_str, default="binpack",
                            choices=placement_strategy_names())
    compat = c.get("compat")
    if compat is not None:
        compat = as_str(compat, "config.compat", ("kai",))
    return Config(
        actions=actions,
        gpu_placement=gpu_placement,
        cpu_placement=cpu_placement,
        staleness_grace_seconds=float(
            get(c, "stalenessGracePeriodSeconds", "config", as_number, default=Fraction(60))
        ),
        max_consolidation_preemptees=get(
            c, "maxConsolidationPreemptees", "config", as_int, default=16, minimum=-1
        ),
        allow_consolidating_reclaim=get(
            c, "allowConsolidatingReclaim", "config", as_bool, default=True
        ),
        k_value=float(get(c, "kValue", "config", as_number, default=Fraction(1), minimum=0)),
        compat=compat,
        extra=_victim_config(c),
    )


def _victim_config(c: dict[str, Any]) -> dict[str, object]:
    """The eviction actions' own keys (gpushare.scheduler.actions.common.options)."""
    try:
        return read_victim_config(c, "config")
    except OptionError as err:
        raise ScenarioError(err.path, err.message) from None
