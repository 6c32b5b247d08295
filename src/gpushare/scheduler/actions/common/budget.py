"""The victim search's accounting: what it did (:class:`SearchStats`) and the work it may
still do (:class:`SearchBudget`). Everything is counted, never timed, so that a cycle stays
deterministic."""

from __future__ import annotations

from dataclasses import dataclass, field

#: Units of search work, the action's search budget's currency: one per victim candidate
#: examined (read through the search's filters), :data:`STEP_WORK` per victim step taken
#: (picking it, accounting for it, trying scenarios with it), :data:`GENERATOR_WORK` per
#: scenario generator started (a round of a gang's search, node-local or across nodes)
#: and :data:`SEARCH_WORK` per job searched for. The weights are what each costs relative
#: to examining one candidate, fitted on large saturated clusters (docs/performance.md).
STEP_WORK = 16
GENERATOR_WORK = 128
SEARCH_WORK = 128


@dataclass(slots=True)
class SearchStats:
    jobs: int = 0
    scenarios: int = 0
    filtered: int = 0
    simulations: int = 0
    deduplicated: int = 0
    prechecked: int = 0  # jobs skipped because no victims could make room
    inadmissible: int = 0  # victim steps the rules forbid on their own, not added
    steps: int = 0  # victim steps read


@dataclass(slots=True)
class SearchBudget:
    """Search work the action may do this cycle (``limit``; 0: no bound) and how much it
    has done (``work``: one cell, shared with the searches' sources, which count each
    candidate examined). A search that runs out stops undecided, between two victim
    steps, and sets :attr:`spent`; the action's first search runs to its own bounds, so
    that every cycle can decide something. ``simulations_left`` is the current
    generator's allowance of simulations."""

    limit: int = 0
    work: list[int] = field(default_factory=lambda: [0])
    spent: bool = False
    simulations_left: int = 0
    stats: SearchStats = field(default_factory=SearchStats)

    def start(self, limit: int) -> None:
        """The action begins: its budget for the cycle."""
        self.limit = limit
        self.spent = False

    def out_of_budget(self) -> bool:
        return 0 < self.limit <= self.work[0]

    def charge(self, units: int) -> None:
        self.work[0] += units

    def new_job(self) -> None:
        self.stats.jobs += 1
        self.charge(SEARCH_WORK)

    def new_generator(self, simulations: int) -> None:
        self.charge(GENERATOR_WORK)
        self.simulations_left = simulations

    def new_step(self) -> None:
        self.stats.steps += 1
        self.charge(STEP_WORK)

    def runs_out(self) -> bool:
        """Whether the current search must stop here (never the action's first)."""
        if self.stats.jobs > 1 and self.out_of_budget():
            self.spent = True
            return True
        return False
