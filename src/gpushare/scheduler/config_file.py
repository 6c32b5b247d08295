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
from gpushare.scheduler.placement_registry import placement_strategy_names

CONFIG_KEYS = frozenset({
    "placement", "stalenessGracePeriodSeconds", "maxConsolidationPreemptees",
    "allowConsolidatingReclaim", "kValue", "compat", "nodePools", "reservation", "jobAging",
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
    gpu_placement, cpu_placement = _placement(c.get("placement"), "config.placement",
                                              ("binpack", "binpack"))
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
        pool_placement=_pool_placement(c.get("nodePools"), (gpu_placement, cpu_placement)),
        reservation_after=_reservation_after(c.get("reservation")),
        job_aging=_job_aging(c.get("jobAging"), compat),
    )


def _reservation_after(raw: Any) -> float | None:
    """``reservation: {afterSeconds}``: how long a job waits before nodes are reserved
    for it (None: the block is absent, no reservations)."""
    if raw is None:
        return None
    r = check_keys(raw, "config.reservation", frozenset({"afterSeconds"}))
    after = get(r, "afterSeconds", "config.reservation", as_number, default=None, minimum=0)
    if after is None:
        raise ScenarioError("config.reservation.afterSeconds", "required")
    return float(after)


def _job_aging(raw: Any, compat: str | None) -> tuple[float, int] | None:
    """``jobAging: {stepSeconds, maxBoost}``: both required, step > 0, boost >= 0."""
    if raw is None:
        return None
    path = "config.jobAging"
    if compat == "kai":
        raise ScenarioError(path, "not available under compat: kai (KAI has no job aging)")
    a = check_keys(raw, path, frozenset({"stepSeconds", "maxBoost"}))
    for key in ("stepSeconds", "maxBoost"):
        if key not in a:
            raise ScenarioError(join(path, key), "required")
    step = get(a, "stepSeconds", path, as_number)
    if step <= 0:
        raise ScenarioError(join(path, "stepSeconds"), f"must be > 0, got {step}")
    return float(step), get(a, "maxBoost", path, as_int, minimum=0)


def _placement(raw: Any, path: str, default: tuple[str, str]) -> tuple[str, str]:
    """A ``placement: {gpu, cpu}`` block; what it leaves out is ``default``'s."""
    if raw is None:
        return default
    p = check_keys(raw, path, frozenset({"gpu", "cpu"}))
    names = placement_strategy_names()
    return (get(p, "gpu", path, as_str, default=default[0], choices=names),
            get(p, "cpu", path, as_str, default=default[1], choices=names))


def _pool_placement(raw: Any, cluster: tuple[str, str]) -> tuple[tuple[str, str, str], ...]:
    """``nodePools: {<pool>: {placement: {gpu, cpu}}}``: each pool's rules, by pool name;
    what a pool leaves out is the cluster's ``placement``."""
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        got = type(raw).__name__
        raise ScenarioError("config.nodePools",
                            f"expected a mapping of pool name to settings, got {got}")
    out = []
    for name in sorted(raw, key=str):
        path = join("config.nodePools", str(name))
        if not isinstance(name, str) or not name:
            raise ScenarioError(path, "a node pool is named by a non-empty string")
        pool = check_keys(raw[name], path, frozenset({"placement"}))
        gpu, cpu = _placement(pool.get("placement"), join(path, "placement"), cluster)
        out.append((name, gpu, cpu))
    return tuple(out)


def _victim_config(c: dict[str, Any]) -> dict[str, object]:
    """The eviction actions' own keys (gpushare.scheduler.actions.common.options)."""
    try:
        return read_victim_config(c, "config")
    except OptionError as err:
        raise ScenarioError(err.path, err.message) from None
