"""Reservations on the API side: the core's ``state.reservations`` persisted on each
reserving PodGroup and read back after a restart.

* the annotation ``gpushare.io/reservation``: ``{"nodes": [...], "since": RFC 3339}``,
  the core's input when the scheduler starts again;
* the condition ``Reserved`` in ``status.conditions`` naming the nodes, for people;
* an Event ``Reserved`` when nodes are reserved, ``ReservationReleased`` when let go.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from gpushare.api.contracts import RESERVATION_ANNOTATION
from gpushare.api.objects import Obj, metadata
from gpushare.api.timefmt import parse_rfc3339, rfc3339
from gpushare.controllers.events import EventRecorder
from gpushare.controllers.scheduling.podgroup_conditions import write_condition
from gpushare.controllers.scheduling.translate import TranslateError
from gpushare.kube.client import PODGROUPS, ApiError, KubeClient
from gpushare.model.reservation import Reservation

log = logging.getLogger(__name__)

CONDITION = "Reserved"


def encode(reservation: Reservation) -> str:
    return json.dumps({"nodes": list(reservation.nodes), "since": rfc3339(reservation.since)},
                      separators=(",", ":"))


def reservation_of(pg: Obj) -> Reservation | None:
    """The reservation a PodGroup carries (None: none); TranslateError naming the
    annotation when it cannot be read."""
    meta = metadata(pg)
    text = (meta.get("annotations") or {}).get(RESERVATION_ANNOTATION)
    if not text:
        return None
    key = f"{meta.get('namespace')}/{meta.get('name')}"
    where = f"podgroup {key}: annotation {RESERVATION_ANNOTATION}"
    try:
        raw = json.loads(text)
        nodes = raw["nodes"]
        since = parse_rfc3339(str(raw["since"]))
    except (ValueError, TypeError, KeyError) as error:
        raise TranslateError(f"{where}: expected {{\"nodes\": [...], \"since\": RFC 3339}}"
                             f" ({error})") from None
    if not isinstance(nodes, list) or not nodes or not all(
            isinstance(n, str) and n for n in nodes):
        raise TranslateError(f"{where}: nodes must be a non-empty list of node names")
    return Reservation(key, tuple(sorted(nodes)), since)


def reserved_condition(reservation: Reservation) -> dict[str, Any]:
    nodes = ", ".join(reservation.nodes)
    return {
        "type": CONDITION,
        "status": "True",
        "reason": "NodesReserved",
        "message": f"waited too long: nodes {nodes} are reserved for this gang; only "
                   "jobs that end before they are due may start there",
        "lastTransitionTime": rfc3339(reservation.since),
        "nodes": list(reservation.nodes),
    }


def describe(reservation: Reservation) -> str:
    return f"reserved node(s) {', '.join(reservation.nodes)} for this gang"


class ReservationWriter:
    """Writes what changed in the reservations after each cycle (on the loop's pool)."""

    def __init__(self, client: KubeClient, events: EventRecorder,
                 submit: Callable[..., Any]) -> None:
        self.client = client
        self.events = events
        self.submit = submit
        #: What the PodGroups carry (or will once the writes land), by job key.
        self.written: dict[str, Reservation] = {}

    def recovered(self, reservation: Reservation) -> None:
        """A reservation read back from its PodGroup: already written."""
        self.written[reservation.job] = reservation

    def publish(self, current: dict[str, Reservation], podgroups: dict[str, Obj]) -> None:
        for key in sorted(set(current) | set(self.written)):
            now, before = current.get(key), self.written.get(key)
            if now == before:
                continue
            if now is None:
                del self.written[key]
            else:
                self.written[key] = now
            pg = podgroups.get(key)
            if pg is None:
                continue  # gone: nothing to write on it
            if now is not None:
                self.events.emit(pg, "Normal", "Reserved", describe(now))
            else:
                self.events.emit(pg, "Normal", "ReservationReleased",
                                 "the nodes reserved for this gang are released")
            self.submit(self._write, key, now)

    def _write(self, key: str, reservation: Reservation | None) -> None:
        namespace, _, name = key.partition("/")
        annotation = None if reservation is None else encode(reservation)
        condition = None if reservation is None else reserved_condition(reservation)
        try:
            self.client.merge_patch(PODGROUPS.item(name, namespace),
                                    {"metadata": {"annotations": {
                                        RESERVATION_ANNOTATION: annotation}}})
            # Only its own condition: the PodGroup may carry others (``Requeued``).
            write_condition(self.client, namespace, name, CONDITION, condition)
        except ApiError as error:
            if not error.not_found:
                log.warning("PodGroup %s reservation not written: %s", key, error)
