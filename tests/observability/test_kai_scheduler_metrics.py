"""KAI Scheduler's scheduler metrics under KAI's names (``kai_`` prefix), with KAI's
meaning: session latencies, creation-to-bind latency, pod groups per action, preemptions,
evictions per pod group, queue usage over a window; no ``_created`` series; a stable
``instance``."""

from __future__ import annotations

import os

import pytest
from prometheus_client import generate_latest

from gpushare.controllers.scheduling.scheduler_metrics import (
    PodGroupRef,
    SchedulerMetrics,
    UsageWindow,
)
from gpushare.kube.metrics_push import default_instance
from gpushare.scheduler.decisions import Bind, CycleResult, Evict, Pipeline, QueueReport


def _value(m: SchedulerMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_session_latencies_are_kais_gauges_in_milliseconds():
    m = SchedulerMetrics()
    m.cycle(0.020, {"allocate": 0.010}, True, (0.003, 0.002))
    assert _value(m, "kai_open_session_latency_milliseconds") == pytest.approx(3.0)
    assert _value(m, "kai_close_session_latency_milliseconds") == pytest.approx(2.0)
    assert _value(m, "kai_e2e_scheduling_latency_milliseconds") == pytest.approx(20.0)
    assert _value(m, "kai_action_scheduling_latency_milliseconds",
                  action="allocate") == pytest.approx(10.0)


def test_task_scheduling_latency_is_creation_to_bind_and_only_for_binds_that_worked():
    m = SchedulerMetrics()
    m.bind(0.004, True, since_created=1.5)
    m.bind(0.004, False, since_created=9.0)
    m.bind(0.004, True, since_created=None)
    assert _value(m, "kai_task_scheduling_latency_milliseconds_count") == 1
    assert _value(m, "kai_task_scheduling_latency_milliseconds_sum") == pytest.approx(1500.0)
    assert _value(m, "kai_task_bind_latency_milliseconds_count") == 3


def test_pod_groups_are_counted_once_per_action_and_evictions_per_pod_group():
    m = SchedulerMetrics()
    gang = PodGroupRef("ml", "gang", "uid-1", "default")
    groups = {"ml/g-0": gang, "ml/g-1": gang, "ml/g-2": gang,
              "d/v": PodGroupRef("d", "victim", "uid-2", "pool-a")}
    result = CycleResult(
        binds=[Bind("ml/g-0", "n", (0,), 0.25, 0), Bind("ml/g-1", "n", (0,), 0.25, 0)],
        pipelines=[Pipeline("ml/g-2", "n", (0,), 0.25, 0)],
        evictions=[Evict("d/v", "over fair share", "reclaim")],
        searches={"reclaim": {"jobs": 2, "succeeded": 1},
                  "preempt": {"jobs": 3, "succeeded": 2}},
    )
    m.decided(result, {"ml/g-0": "reclaim", "ml/g-1": "reclaim", "ml/g-2": "reclaim"},
              groups)
    # three pods of one gang: one pod group scheduled
    assert _value(m, "kai_podgroups_scheduled_by_action_total", action="reclaim") == 1
    assert _value(m, "kai_podgroups_scheduled_by_action_total", action="allocate") is None
    assert _value(m, "kai_podgroups_acted_on_by_action_total", action="reclaim") == 2
    assert _value(m, "kai_podgroups_acted_on_by_action_total", action="preempt") == 3
    assert _value(m, "kai_total_preemption_attempts_total") == 2
    assert _value(m, "kai_pod_group_evicted_pods_total", podgroup="victim", namespace="d",
                  uid="uid-2", nodepool="pool-a", action="reclaim") == 1


def test_counters_export_no_created_series():
    m = SchedulerMetrics()
    m.decided(CycleResult(binds=[Bind("d/a", "n", (0,), 0.5, 0)]), {})
    text = generate_latest(m.registry).decode()
    assert "kai_podgroups_scheduled_by_action_total" in text
    assert "_created" not in text


def test_queue_usage_is_the_queues_share_of_what_the_cluster_offered():
    m = SchedulerMetrics()
    half = {"gpu": 0.5, "cpu": 1000.0, "memory": 0.0}
    report = QueueReport(fair_share=half, deserved=half, allocated=half,
                         allocated_non_preemptible=half, requested=half)
    m.queue_reports({"nlp": report}, ["nlp"])
    capacity = {"gpu": 1.0, "cpu": 4000.0, "memory": 1024.0}
    m.usage_tick(0.0, capacity)
    m.usage_tick(60.0, capacity)
    assert _value(m, "kai_queue_gpu_usage", queue_name="nlp") == pytest.approx(0.5)
    assert _value(m, "kai_queue_cpu_usage", queue_name="nlp") == pytest.approx(0.25)
    assert _value(m, "kai_queue_memory_usage", queue_name="nlp") == 0


def test_usage_window_forgets_the_past_gradually():
    w = UsageWindow(window=100.0)
    full, idle = {"q": {"gpu": 1.0}}, {"q": {"gpu": 0.0}}
    cap = {"gpu": 1.0}
    w.tick(0.0, full, cap)
    assert w.tick(100.0, full, cap)["q"]["gpu"] == pytest.approx(1.0)
    later = w.tick(200.0, idle, cap)["q"]["gpu"]
    much_later = w.tick(1000.0, idle, cap)["q"]["gpu"]
    assert 0.2 < later < 0.6  # a window later, the busy hour still counts, decayed
    assert much_later < later / 5


def test_instance_label_is_stable_across_restarts(monkeypatch):
    monkeypatch.delenv("POD_NAME", raising=False)
    instance = default_instance()
    assert str(os.getpid()) not in instance.split("-")
    monkeypatch.setenv("POD_NAME", "gpushare-controllers-7d9f-abcde")
    assert default_instance() == "gpushare-controllers-7d9f-abcde"
