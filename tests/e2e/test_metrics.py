"""Scraping the control plane's /metrics after the three-team pattern: KAI's queue names
show 0.33 GPU per team, the reclaim is counted once per eviction, a waiting job is counted
under its reason; the figures come from the controllers' process through the API."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e_support import add_node, wait_for
from metrics_support import Scraper, total, value

from gpushare.controller_manager import start_controllers
from gpushare.controllers.scheduling.scheduler_metrics import reason_code

EXAMPLES = Path(__file__).resolve().parents[2] / "src/gpushare/examples/three_teams"
TEAMS = ("nlp", "vision", "recsys")


@pytest.fixture
def pushing_controllers(server):
    running = start_controllers(str(server.kubeconfig), metrics_push_interval=0.3)
    yield running
    running.stop()


def _events(kubectl, reason: str) -> list[dict]:
    return [e for e in kubectl.json("get", "events", "-n", "default")["items"]
            if e.get("reason") == reason]


def test_three_teams_on_metrics(server, pushing_controllers, kubectl):
    add_node(server.kubeconfig, "gpu-node-1", "1xL40S")
    kubectl.run("apply", "-f", str(EXAMPLES / "queues.yaml"))
    kubectl.run("apply", "-f", str(EXAMPLES / "nlp-burst.yaml"))
    scraper = Scraper(server.kubeconfig)

    def nlp_bursts():
        s = scraper.samples()
        return s if value(s, "queue_allocated_gpus", queue_name="nlp") == pytest.approx(0.99) \
            else None

    samples = wait_for(nlp_bursts, what="nlp holding 0.99 on /metrics")
    assert value(samples, "queue_deserved_gpus", queue_name="nlp") == pytest.approx(0.33)
    assert value(samples, "queue_deserved_gpus", queue_name="ml-org") == pytest.approx(1.0)
    assert value(samples, "gpushare_queue_limit", queue_name="nlp",
                 resource="gpu") == pytest.approx(1.0)
    assert value(samples, "queue_quota_cpu_cores", queue_name="nlp") == -1
    bound_before = total(samples, "gpushare_scheduler_decisions_total", result="bound")
    assert bound_before == 3

    kubectl.run("apply", "-f", str(EXAMPLES / "vision.yaml"), "-f", str(EXAMPLES / "recsys.yaml"))

    def settled():
        s = scraper.samples()
        got = {t: value(s, "queue_allocated_gpus", queue_name=t) for t in TEAMS}
        return s if all(v == pytest.approx(0.33) for v in got.values()) else None

    samples = wait_for(settled, timeout=60, what="every team at 0.33 on /metrics")
    for team in TEAMS:
        assert value(samples, "queue_fair_share_gpu", queue_name=team) == pytest.approx(
            0.33, abs=0.011)
        assert value(samples, "gpushare_queue_allocated_non_preemptible", queue_name=team,
                     resource="gpu") == 0
    assert value(samples, "queue_allocated_gpus", queue_name="ml-org") == pytest.approx(0.99)

    # The reclaim: two nlp pods evicted, each counted once, as many as the Evict events.
    evictions = [e for e in _events(kubectl, "Evict") if "reclaim" in e["message"]]
    assert len(evictions) == 2
    assert total(samples, "gpushare_scheduler_decisions_total", action="reclaim",
                 result="evicted") == 2
    assert total(samples, "gpushare_scheduler_decisions_total", result="evicted") == 2
    # Two more cycles' worth of pushes later the count has not grown.
    samples = wait_for(lambda: (s := scraper.samples()) and total(
        s, "gpushare_scheduler_cycles_total") > total(
        samples, "gpushare_scheduler_cycles_total") + 2 and s, what="more cycles")
    assert total(samples, "gpushare_scheduler_decisions_total", result="evicted") == 2

    # The nlp Job re-created the evicted pods: the job waits, counted under its reason.
    def pending_reason():
        events = [e for e in _events(kubectl, "Unschedulable")
                  if e["involvedObject"]["kind"] == "Pod"
                  and e["involvedObject"]["name"].startswith("nlp-train")]
        return events[-1]["message"] if events else None

    reason = wait_for(pending_reason, what="an Unschedulable event on an nlp pod")
    code = reason_code(reason)
    assert code != "Other", reason

    def counted():
        s = scraper.samples()
        return s if value(s, "gpushare_scheduler_pending_jobs", queue_name="nlp",
                          reason=code) == 1 else None

    samples = wait_for(counted, what=f"one nlp job pending under {code}")
    assert total(samples, "gpushare_scheduler_pending_jobs") == 1
    # The controllers say who they are; the API server's own figures are there too.
    assert value(samples, "gpushare_component_push_age_seconds", component="controllers") < 30
    assert total(samples, "apiserver_request_total") > 0
    hist = [n for n, lab, _ in samples if n == "gpushare_scheduler_action_duration_seconds_count"
            and lab.get("action") == "reclaim"]
    assert hist, "per-action latency histogram"
