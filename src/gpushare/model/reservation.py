"""Reservations: nodes held for a gang that has waited too long (carried between cycles).

A reservation is part of a cycle's input and output: the caller keeps it (the controllers
persist it on the job's PodGroup) and hands it back in the next cycle, so a restarted
scheduler holds the same nodes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Reservation:
    job: str  # the job's key, "namespace/name"
    nodes: tuple[str, ...]  # in name order
    since: float  # when it was made, on the caller's clock
