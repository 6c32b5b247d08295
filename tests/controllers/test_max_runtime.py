"""Maximum runtime, the pure half: which jobs are over and when each is due, the queue's
``spec.maxRuntime`` parsed, the PodGroup mark written and read, and the gang's running
since (no I/O, no clock)."""

from __future__ import annotations

import math
import re

import pytest

from gpushare.controllers.scheduling.max_runtime import (
    FAIL,
    REQUEUE,
    Exceeded,
    JobRun,
    QueueLimit,
    decide,
    encode,
    exceeded_of,
    message,
    not_before,
    queue_limit,
    run_limit,
    running_since,
)
from gpushare.controllers.scheduling.podgroup_conditions import with_condition
from gpushare.controllers.scheduling.translate import TranslateError


def _run(key: str = "ns/a", limit: float | None = 10.0, since: float | None = 100.0,
         policy: str = REQUEUE, delay: float = 60.0, mark: Exceeded | None = None) -> JobRun:
    return JobRun(key, limit, policy, delay, since, mark)


def test_a_job_is_due_at_running_since_plus_its_limit_and_stopped_from_then() -> None:
    before = decide([_run()], now=109.5)
    assert before.stops == [] and before.next_due == 110.0
    at = decide([_run()], now=110.0)
    assert [s.key for s in at.stops] == ["ns/a"]
    stop = at.stops[0]
    assert stop.ran == 10.0 and stop.limit == 10.0
    assert stop.mark == Exceeded(REQUEUE, 110.0, 100.0, 170.0)
    assert "maximum runtime of 10s" in message(stop) and "requeued" in message(stop)


def test_requeue_delay_is_rounded_up_to_whole_seconds_never_down() -> None:
    stop = decide([_run(delay=3.0)], now=110.4).stops[0]
    assert stop.mark.not_before == 114.0  # the mark is written in whole seconds


def test_fail_holds_the_job_for_ever() -> None:
    stop = decide([_run(policy=FAIL)], now=200.0).stops[0]
    assert stop.mark.policy == FAIL and stop.mark.not_before == math.inf
    assert "failed" in message(stop)
    # A failed job is not stopped again whatever runs later, and nothing of it falls due.
    later = decide([_run(policy=FAIL, since=300.0, mark=stop.mark)], now=400.0)
    assert later.stops == [] and later.next_due is None


def test_no_limit_or_no_placed_gang_is_never_due() -> None:
    decision = decide([_run(limit=None), _run("ns/b", since=None)], now=1e9)
    assert decision.stops == [] and decision.next_due is None


def test_a_run_is_stopped_once_and_a_later_run_counts_afresh() -> None:
    mark = Exceeded(REQUEUE, 110.0, 100.0, 170.0)
    # the evicted pods are still on their nodes: the same run, not stopped again
    same = decide([_run(mark=mark)], now=115.0)
    assert same.stops == [] and same.next_due == 170.0
    # placed again after the delay: its own limit from its own running since
    again = decide([_run(since=171.0, mark=mark)], now=175.0)
    assert again.stops == [] and again.next_due == 181.0
    assert [s.key for s in decide([_run(since=171.0, mark=mark)], now=181.0).stops] == ["ns/a"]


def test_delays_over_are_released_and_the_earliest_due_is_returned() -> None:
    runs = [_run("ns/a", since=None, mark=Exceeded(REQUEUE, 10.0, 0.0, 50.0)),
            _run("ns/b", since=None, mark=Exceeded(REQUEUE, 10.0, 0.0, 30.0)),
            _run("ns/c", since=20.0, limit=15.0)]
    decision = decide(runs, now=40.0)
    assert decision.released == ["ns/b"]
    assert decision.next_due == 50.0  # ns/c is over: it is stopped, not due
    assert [s.key for s in decision.stops] == ["ns/c"]


def test_running_since_is_when_the_gang_minimum_was_placed() -> None:
    assert running_since(2, [30.0, 10.0, 20.0]) == 20.0
    assert running_since(0, [5.0]) == 5.0
    assert running_since(3, [1.0, 2.0]) is None


def test_a_limit_raised_or_removed_during_a_run_does_not_lengthen_it() -> None:
    assert run_limit((100.0, 60.0), 100.0, None) == 60.0  # annotation removed
    assert run_limit((100.0, 60.0), 100.0, 3600.0) == 60.0  # raised
    assert run_limit((100.0, 60.0), 100.0, 30.0) == 30.0  # lowered: applies
    assert run_limit((100.0, 60.0), 500.0, None) is None  # a new run: as it stands
    assert run_limit(None, 100.0, 45.0) == 45.0
    assert run_limit((100.0, 60.0), None, 10.0) == 10.0  # not placed


def _queue(max_runtime: object) -> dict[str, object]:
    return {"metadata": {"name": "team"}, "spec": {"maxRuntime": max_runtime}}


def test_queue_limit_defaults_and_values() -> None:
    assert queue_limit({"metadata": {"name": "q"}, "spec": {}}) == QueueLimit(None, REQUEUE, 60.0)
    assert queue_limit(_queue({"seconds": 7200, "policy": "fail"})) == QueueLimit(7200.0, FAIL,
                                                                                60.0)
    assert queue_limit(_queue({"requeueDelaySeconds": 0})) == QueueLimit(None, REQUEUE, 0.0)


@pytest.mark.parametrize(("value", "field"), [
    ({"seconds": -5}, "spec.maxRuntime.seconds"),
    ({"seconds": 0}, "spec.maxRuntime.seconds"),
    ({"seconds": "2h"}, "spec.maxRuntime.seconds"),
    ({"seconds": True}, "spec.maxRuntime.seconds"),
    ({"seconds": 5, "policy": "later"}, "spec.maxRuntime.policy"),
    ({"requeueDelaySeconds": -1}, "spec.maxRuntime.requeueDelaySeconds"),
    ("10m", "spec.maxRuntime"),
])
def test_bad_queue_limits_name_the_field(value: object, field: str) -> None:
    with pytest.raises(TranslateError, match="queue team: " + re.escape(field)):
        queue_limit(_queue(value))


def _pg(text: str | None) -> dict[str, object]:
    annotations = {} if text is None else {"gpushare.io/max-runtime-exceeded": text}
    return {"metadata": {"name": "a", "namespace": "ns", "annotations": annotations}}


def test_the_mark_round_trips_and_is_the_schedulers_not_before() -> None:
    requeued = Exceeded(REQUEUE, 1000.0, 990.0, 1060.0)
    assert exceeded_of(_pg(encode(requeued))) == requeued
    assert not_before(_pg(encode(requeued))) == 1060.0
    failed = Exceeded(FAIL, 1000.0, 990.0, math.inf)
    assert exceeded_of(_pg(encode(failed))) == failed
    assert not_before(_pg(None)) is None


@pytest.mark.parametrize("text", ["{", '{"policy": "requeue"}', '{"policy": "x", "at": '
                                  '"2026-01-01T00:00:00Z", "runningSince": '
                                  '"2026-01-01T00:00:00Z"}'])
def test_an_unreadable_mark_names_the_annotation(text: str) -> None:
    with pytest.raises(TranslateError, match=r"podgroup ns/a: annotation "
                                             r"gpushare\.io/max-runtime-exceeded"):
        exceeded_of(_pg(text))


def test_one_condition_type_is_replaced_and_the_others_kept() -> None:
    reserved = {"type": "Reserved", "status": "True"}
    requeued = {"type": "Requeued", "status": "True"}
    assert with_condition([reserved], "Requeued", requeued) == [reserved, requeued]
    assert with_condition([reserved, requeued], "Reserved", None) == [requeued]
    assert with_condition(None, "Requeued", None) == []
