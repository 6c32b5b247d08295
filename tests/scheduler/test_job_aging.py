"""Per-job aging (``jobAging``): inside a queue a pending job orders as if its priority
were higher by one point per whole step waited, up to a cap; off by default and refused
under ``compat: kai``."""

from __future__ import annotations

import pytest
from scheduler_builders import add_job, cluster, queue

from gpushare.controllers.scheduling.mirror import JobMemory, Mirror
from gpushare.model.schema import ScenarioError
from gpushare.scheduler import Config, run_cycle
from gpushare.scheduler.config_file import parse_config
from gpushare.scheduler.cycle import open_session
from gpushare.scheduler.ordering import order_priority


def _state(old_created: float):
    # One free GPU; an old priority-50 job and a new priority-60 job both ask for it.
    state = cluster(gpus=1)
    state.upsert_queue(queue("q", gpu_quota=1))
    old = add_job(state, "old", "q", whole=1, priority=50)
    old.created_at = old_created
    new = add_job(state, "new", "q", whole=1, priority=60)
    new.created_at = 10_000.0
    return state


def test_without_aging_priority_alone_decides():
    result = run_cycle(_state(0.0), Config(), 10_000.0)
    assert [b.pod for b in result.binds] == ["default/new-0"]


def test_an_old_job_passes_a_newer_higher_priority_one():
    result = run_cycle(_state(0.0), Config(job_aging=(300.0, 20)), 10_000.0)
    assert [b.pod for b in result.binds] == ["default/old-0"]


@pytest.mark.parametrize(("waited", "boost"), [
    (0.0, 0), (299.0, 0), (300.0, 1), (899.0, 2), (6000.0, 20), (60_000.0, 20),
])
def test_boost_counts_whole_steps_up_to_the_cap(waited, boost):
    state = _state(0.0)
    session = open_session(state, Config(job_aging=(300.0, 20)), waited)
    assert order_priority(session, state.jobs["default/old"]) == 50 + boost


def test_wait_counts_from_when_the_job_last_became_pending():
    state = _state(0.0)
    state.jobs["default/old"].pending_since = 9_000.0
    session = open_session(state, Config(job_aging=(300.0, 20)), 10_000.0)
    assert order_priority(session, state.jobs["default/old"]) == 53


def test_config_reads_job_aging():
    assert parse_config({"jobAging": {"stepSeconds": 60, "maxBoost": 10}}).job_aging == (60.0, 10)
    assert parse_config(None).job_aging is None


@pytest.mark.parametrize(("raw", "where"), [
    ({"jobAging": {"stepSeconds": 0, "maxBoost": 1}}, "config.jobAging.stepSeconds"),
    ({"jobAging": {"stepSeconds": 60, "maxBoost": -1}}, "config.jobAging.maxBoost"),
    ({"jobAging": {"stepSeconds": 60}}, "config.jobAging.maxBoost"),
    ({"jobAging": {"stepSeconds": 60, "maxBoost": 1, "cap": 2}}, "config.jobAging.cap"),
    ({"jobAging": {"stepSeconds": 60, "maxBoost": 1}, "compat": "kai"}, "config.jobAging"),
])
def test_bad_job_aging_names_the_field(raw, where):
    with pytest.raises(ScenarioError) as err:
        parse_config(raw)
    assert err.value.path == where


def test_mirror_counts_the_wait_from_the_last_eviction():
    mirror = Mirror()
    mirror.on_queue("ADDED", {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
                              "metadata": {"name": "q"}, "spec": {}})
    mirror.job_memory["ns/pg"] = JobMemory(last_eviction_at=1234.0)
    mirror.on_podgroup("ADDED", {"apiVersion": "scheduling.run.ai/v2alpha2",
                                 "kind": "PodGroup",
                                 "metadata": {"name": "pg", "namespace": "ns"},
                                 "spec": {"minMember": 1, "queue": "q"}})
    assert mirror.state.jobs["ns/pg"].pending_since == 1234.0
