"""The pieces of the metrics path without processes: what the API server keeps of pushes,
the measurement reports it accepts, the scheduler's counting rules."""

from __future__ import annotations

from fractions import Fraction

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpushare.apiserver.errors import ApiError
from gpushare.apiserver.telemetry.pushes import ComponentMetrics, ResourceUsage
from gpushare.controllers.scheduling.scheduler_metrics import SchedulerMetrics, reason_code
from gpushare.model.queue import Queue, ResourceSpec
from gpushare.scheduler.decisions import Bind, CycleResult, Evict, Pipeline, QueueReport


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _exposition(node: str, value: float) -> bytes:
    r = CollectorRegistry()
    Gauge("gpushare_gpu_slots_held", "slots", ("node", "gpu"), registry=r).labels(
        node, "0").set(value)
    Counter("gpushare_watchdog_kills", "kills", ("node",), registry=r).labels(node).inc()
    return generate_latest(r)


def _render(components: ComponentMetrics,
            exclude: frozenset[str] = frozenset()) -> list[tuple[str, dict[str, str], float]]:
    text = components.render(exclude).decode()
    # Prometheus' own parser is the judge of the merged text
    families = list(text_string_to_metric_families(text))
    names = [f.name for f in families]
    assert len(names) == len(set(names)), "one family per name in the union"
    return [(s.name, dict(s.labels), s.value) for f in families for s in f.samples]


def test_pushes_of_two_agents_are_merged_into_one_family_each():
    clock = Clock()
    c = ComponentMetrics(clock)
    c.push("agent", "node-a", _exposition("node-a", 2), "5")
    c.push("agent", "node-b", _exposition("node-b", 3), "5")
    samples = _render(c)
    slots = {lab["node"]: v for n, lab, v in samples if n == "gpushare_gpu_slots_held"}
    assert slots == {"node-a": 2, "node-b": 3}
    kills = [lab for n, lab, _ in samples if n == "gpushare_watchdog_kills_total"]
    assert {k["instance"] for k in kills} == {"node-a", "node-b"}
    assert not [n for n, _, _ in samples if n.endswith("_created")]


def test_histograms_and_odd_label_values_survive_the_merge():
    r = CollectorRegistry()
    h = Histogram("lat_seconds", "latency", ("action",), registry=r, buckets=(0.1, 1.0))
    h.labels('re"claim {x} ').observe(0.3)
    Gauge("queue_allocated_gpus", "g", ("queue_name",), registry=r).labels("nlp").set(0.33)
    c = ComponentMetrics(Clock())
    c.push("controllers", "host-1", generate_latest(r), "5")
    c.push("controllers", "host-2", generate_latest(r), "5")
    samples = _render(c)
    buckets = [(lab, v) for n, lab, v in samples if n == "lat_seconds_bucket"]
    assert len(buckets) == 6  # 3 buckets x 2 pushers
    assert {lab["action"] for lab, _ in buckets} == {'re"claim {x} '}
    assert [v for n, lab, v in samples if n == "queue_allocated_gpus"
            and lab["instance"] == "host-2"] == [0.33]


def test_a_push_never_replaces_the_servers_own_families():
    c = ComponentMetrics(Clock())
    r = CollectorRegistry()
    Gauge("apiserver_watches", "fake", registry=r).set(99)
    Gauge("queue_info", "q", ("queue_name",), registry=r).labels("a").set(1)
    c.push("intruder", "x", generate_latest(r), "5")
    names = {n for n, _, _ in _render(c, frozenset({"apiserver_watches"}))}
    assert "apiserver_watches" not in names and "queue_info" in names


def test_a_push_that_stops_expires():
    clock = Clock()
    c = ComponentMetrics(clock)
    c.push("agent", "node-a", _exposition("node-a", 2), "5")  # ttl: 3 x 5 s
    clock.now += 14
    assert any(n == "gpushare_gpu_slots_held" for n, _, _ in _render(c))
    c.push("agent", "node-b", _exposition("node-b", 1), "5")
    clock.now += 2
    nodes = {lab["node"] for n, lab, _ in _render(c) if n == "gpushare_gpu_slots_held"}
    assert nodes == {"node-b"}
    assert [i for _, i, _ in c.components()] == ["node-b"]


@pytest.mark.parametrize(("component", "instance", "body", "interval", "field"), [
    ("agent", "a", b"not metrics {{{", "5", "body"),
    ("agent/x", "a", b"", "5", "component"),
    ("agent", "", b"", "5", "instance"),
    ("agent", "a", b"", "soon", "interval"),
    ("agent", "a", b"", "0", "interval"),
])
def test_a_bad_push_is_refused_naming_the_field(component, instance, body, interval, field):
    c = ComponentMetrics(Clock())
    with pytest.raises(ApiError) as err:
        c.push(component, instance, body, interval)
    assert err.value.code == 400
    assert err.value.message.startswith(field)
    assert c.components() == []


def _report(**over):
    body = {"timestamp": "2026-01-01T00:00:00Z", "window": 5,
            "node": {"cpu": 1.5, "memory": 2048},
            "pods": [{"namespace": "default", "name": "p",
                      "containers": [{"name": "main", "cpu": 0.25, "memory": 4096}]}]}
    body.update(over)
    return body


def test_resource_usage_becomes_node_and_pod_metrics():
    u = ResourceUsage(Clock())
    u.push("node-a", _report(), "5")
    (node,) = u.node_metrics()
    assert node["usage"] == {"cpu": "1500000000n", "memory": "2Ki"}
    (pod,) = u.pod_metrics()
    assert pod["metadata"] == {"name": "p", "namespace": "default",
                               "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {}}
    assert pod["containers"] == [{"name": "main",
                                  "usage": {"cpu": "250000000n", "memory": "4Ki"}}]


@pytest.mark.parametrize(("body", "field"), [
    (_report(node={"cpu": -1, "memory": 0}), "node.cpu"),
    (_report(pods=[{"namespace": "d", "name": "p", "containers": [{"name": "m",
                                                                   "cpu": "x"}]}]),
     "pods[0].containers[0].cpu"),
    (_report(pods=[{"name": "p", "containers": []}]), "pods[0].namespace"),
    (_report(timestamp=5), "timestamp"),
    ([], "body"),
])
def test_a_bad_measurement_report_names_the_field(body, field):
    u = ResourceUsage(Clock())
    with pytest.raises(ApiError) as err:
        u.push("node-a", body, "5")
    assert err.value.message.startswith(field)
    assert u.node_metrics() == []


@pytest.mark.parametrize(("text", "code"), [
    ("OverLimit: queue nlp would exceed its gpu limit", "OverLimit"),
    ("QueueDoesNotExist: queue x does not exist", "QueueDoesNotExist"),
    ("queue ml-org is not a leaf queue", "NotLeafQueue"),
    ("job has 1 pods while 2 are required for gang scheduling", "GangIncomplete"),
    ("Resources were found for 1 pods while 2 are required for gang scheduling. Additional "
     "pods cannot be scheduled due to: 0/1 nodes are available", "GangUnschedulable"),
    ("Resources were not found for pod default/p due to: 0/1 nodes are available: 1 node(s) "
     "no GPU with enough free share.", "Unschedulable"),
    ("cannot be scheduled: gpu-fraction: must be in (0, 1)", "InvalidObject"),
    ("something new", "Other"),
])
def test_reason_codes_are_bounded(text, code):
    assert reason_code(text) == code


def _value(m: SchedulerMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_decisions_are_counted_once_each_by_action_and_result():
    m = SchedulerMetrics()
    result = CycleResult(
        binds=[Bind("d/a", "n", (0,), 0.33, 100), Bind("d/b", "n", (0,), 0.33, 100)],
        pipelines=[Pipeline("d/c", "n", (0,), 0.33, 100)],
        evictions=[Evict("d/x", "nlp over fair share", "reclaim"),
                   Evict("d/y", "lower priority", "preempt")],
    )
    m.decided(result, {"d/b": "consolidation", "d/c": "reclaim"})
    assert _value(m, "gpushare_scheduler_decisions_total", action="allocate",
                  result="bound") == 1
    assert _value(m, "gpushare_scheduler_decisions_total", action="consolidation",
                  result="bound") == 1
    assert _value(m, "gpushare_scheduler_decisions_total", action="reclaim",
                  result="pipelined") == 1
    assert _value(m, "gpushare_scheduler_decisions_total", action="reclaim",
                  result="evicted") == 1
    assert _value(m, "gpushare_scheduler_decisions_total", action="preempt",
                  result="evicted") == 1


def test_pending_jobs_move_between_reasons_and_go():
    m = SchedulerMetrics()
    m.pending_set("job/d/a", "nlp", "OverLimit: x")
    m.pending_set("job/d/a", "nlp", "OverLimit: y")  # same code: still one
    m.pending_set("job/d/b", "nlp", "OverLimit: z")
    assert _value(m, "gpushare_scheduler_pending_jobs", queue_name="nlp",
                  reason="OverLimit") == 2
    m.pending_set("job/d/a", "nlp", "queue nlp is not a leaf queue")
    assert _value(m, "gpushare_scheduler_pending_jobs", queue_name="nlp",
                  reason="OverLimit") == 1
    m.pending_clear("job/d/a")
    m.pending_clear("job/d/a")
    assert _value(m, "gpushare_scheduler_pending_jobs", queue_name="nlp",
                  reason="NotLeafQueue") == 0


def test_queue_gauges_follow_spec_and_reports_and_go_with_the_queue():
    m = SchedulerMetrics()
    q = Queue("nlp", parent="ml-org", resources={
        "gpu": ResourceSpec(Fraction(33, 100), Fraction(1)),
        "cpu": ResourceSpec(Fraction(-1), Fraction(-1)),
        "memory": ResourceSpec(Fraction(2_000_000_000), Fraction(-1)),
    })
    m.queue_spec("nlp", q)
    assert _value(m, "queue_deserved_gpus", queue_name="nlp") == pytest.approx(0.33)
    assert _value(m, "queue_quota_cpu_cores", queue_name="nlp") == -1
    assert _value(m, "queue_quota_memory_bytes", queue_name="nlp") == 2e9
    assert _value(m, "queue_info", queue_name="nlp", parent_queue="ml-org") == 1
    nat = {"gpu": 0.33, "cpu": 500.0, "memory": 1024.0}
    report = QueueReport(fair_share=nat, deserved=nat, allocated=nat,
                         allocated_non_preemptible={"gpu": 0.0, "cpu": 0.0, "memory": 0.0},
                         requested={"gpu": 0.66, "cpu": 500.0, "memory": 1024.0})
    m.queue_reports({"nlp": report}, ["nlp"])
    assert _value(m, "queue_allocated_gpus", queue_name="nlp") == pytest.approx(0.33)
    assert _value(m, "queue_allocated_cpu_cores", queue_name="nlp") == 0.5
    assert _value(m, "queue_allocated_memory_bytes", queue_name="nlp") == 1024 * 1024 * 1024
    assert _value(m, "gpushare_queue_requested", queue_name="nlp",
                  resource="gpu") == pytest.approx(0.66)
    m.queue_spec("nlp", None)
    assert _value(m, "queue_allocated_gpus", queue_name="nlp") is None
    assert _value(m, "queue_info", queue_name="nlp", parent_queue="ml-org") is None
