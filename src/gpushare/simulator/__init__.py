"""Scenario simulator: scenario files -> scheduling cycles -> results and comparisons."""

from gpushare.simulator.runner import ScenarioResult, build_state, run, settle
from gpushare.simulator.scenario import Scenario, load_file, parse
from gpushare.simulator.schema import ScenarioError

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
