"""Scenario simulator: scenario files -> scheduling cycles -> results and comparisons."""

from gpushare.model.schema import ScenarioError
from gpushare.simulator.runner import ScenarioResult, build_state, run, settle
from gpushare.simulator.scenario import Scenario, load_file, parse

__all__ = [
    "Scenario",
    "ScenarioError",
    "ScenarioResult",
    "build_state",
    "load_file",
    "parse",
    "run",
    "settle",
]
