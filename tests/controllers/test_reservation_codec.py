"""The reservation's fields on the API objects: the PodGroup annotation read back after a
restart, the declared runtime, the Queue's threshold; bad values are refused naming the
field."""

from __future__ import annotations

import pytest

from gpushare.controllers.scheduling.reservations import encode, reservation_of
from gpushare.controllers.scheduling.translate import (
    TranslateError,
    expected_runtime,
    queue_from_api,
)
from gpushare.model.reservation import Reservation


def _pg(annotations: dict[str, str]) -> dict:
    return {"metadata": {"name": "gang", "namespace": "ns", "annotations": annotations},
            "spec": {"queue": "team"}}


def _queue(spec_extra: dict) -> dict:
    return {"metadata": {"name": "team"},
            "spec": {"resources": {"gpu": {"quota": 1}}, **spec_extra}}


def test_the_annotation_round_trips() -> None:
    held = Reservation("ns/gang", ("n1", "n2"), 1_767_225_600.0)
    got = reservation_of(_pg({"gpushare.io/reservation": encode(held)}))
    assert got == held
    assert reservation_of(_pg({})) is None


@pytest.mark.parametrize("text", ["{", '{"nodes": [], "since": "2026-01-01T00:00:00Z"}',
                                  '{"nodes": ["n1"]}', '{"nodes": [3], "since": "x"}'])
def test_an_unreadable_reservation_names_the_annotation(text: str) -> None:
    with pytest.raises(TranslateError, match=r"ns/gang: annotation gpushare\.io/reservation"):
        reservation_of(_pg({"gpushare.io/reservation": text}))


def test_expected_runtime_is_a_positive_duration() -> None:
    assert expected_runtime(_pg({"gpushare.io/expected-runtime": "1h30m"})) == 5400.0
    assert expected_runtime(_pg({})) is None
    for bad in ("soon", "0s", "-5m"):
        with pytest.raises(TranslateError, match=r"annotation gpushare\.io/expected-runtime"):
            expected_runtime(_pg({"gpushare.io/expected-runtime": bad}))


def test_queue_reservation_after() -> None:
    assert queue_from_api(_queue({})).reservation_after is None
    assert queue_from_api(_queue({"reservationAfter": "30m"})).reservation_after == 1800.0
    assert queue_from_api(_queue({"reservationAfter": "-1s"})).reservation_after == -1.0
    with pytest.raises(TranslateError, match=r"queue team: spec\.reservationAfter"):
        queue_from_api(_queue({"reservationAfter": "later"}))


def test_gpushare_status_lists_the_reservations() -> None:
    from rich.console import Console

    from gpushare.cli.status import render, status_report

    held = Reservation("ns/gang", ("n1", "n2"), 1_767_225_600.0)
    pgs = [_pg({"gpushare.io/reservation": encode(held)}), _pg({}),
           _pg({"gpushare.io/reservation": "{broken"})]
    report = status_report([], [], [], [], pgs)
    assert report["reservations"] == [{"podgroup": "ns/gang", "queue": "team",
                                       "nodes": ["n1", "n2"], "since": "2026-01-01T00:00:00Z"}]
    console = Console(record=True, width=120)
    render(report, console)
    text = console.export_text()
    assert "ns/gang" in text and "n1, n2" in text
