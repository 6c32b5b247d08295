"""Semi-preemptible jobs: the gang minimum is charged as non-preemptible use, the burst
above it as preemptible; the charge follows every change, statements rolled back too."""

from __future__ import annotations

from scheduler_builders import cluster, queue

from gpushare.api.crds import podgroup_crd
from gpushare.apiserver.registry.crds import validate_against_schema
from gpushare.controllers.scheduling.translate import job_from_podgroup
from gpushare.model import GpuRequest, Job, Pod, PodStatus
from gpushare.model.quantities import MILLI
from gpushare.scheduler.semi import core_part


def _state(semi: bool = True, running: int = 4):
    state = cluster(gpus=4)
    state.upsert_queue(queue("q", gpu_quota=2))
    job = Job("serve", "default", "q", priority=50, preemptible=True,
              semi_preemptible=semi, min_member=2)
    state.upsert_job(job)
    for i in range(4):
        on = i < running
        state.upsert_pod(Pod(f"serve-{i}", "default", job.key, i, gpu=GpuRequest(whole=1),
                             status=PodStatus.RUNNING if on else PodStatus.PENDING,
                             node="node0" if on else None, gpu_indices=(i,) if on else ()))
    return state, job


def _np_gpus(state) -> float:
    return state.queue_usage["q"].allocated_np.gpu / MILLI


def test_only_the_core_is_charged_as_non_preemptible():
    state, _ = _state()
    assert state.queue_usage["q"].allocated.gpu == 4 * MILLI
    assert _np_gpus(state) == 2


def test_a_preemptible_job_charges_nothing_non_preemptible():
    state, _ = _state(semi=False)
    assert _np_gpus(state) == 0


def test_the_charge_follows_evictions_and_rollback():
    state, _ = _state()
    stmt = state.statement()
    cp = stmt.checkpoint()
    for key in ("default/serve-3", "default/serve-2", "default/serve-1"):
        stmt.evict(state.pods[key], "test", "preempt")
    assert _np_gpus(state) == 1  # one pod left allocated: the core is what remains
    stmt.rollback(cp)
    assert _np_gpus(state) == 2
    stmt.discard()


def test_the_charge_goes_when_the_job_does():
    state, job = _state()
    state.remove_job(job.key)
    assert _np_gpus(state) == 0


def test_a_job_turned_preemptible_stops_being_charged():
    state, _ = _state()
    state.upsert_job(Job("serve", "default", "q", priority=50, preemptible=True, min_member=2))
    assert _np_gpus(state) == 0
    state.upsert_job(Job("serve", "default", "q", priority=50, preemptible=True,
                         semi_preemptible=True, min_member=2))
    assert _np_gpus(state) == 2


def test_core_part_of_a_step_fills_the_places_left():
    state, job = _state(running=1)
    pods = state.job_pods(job)
    step = [p for p in pods if p.status is PodStatus.PENDING]
    assert [p.name for p in core_part(job, pods, step)] == ["serve-1"]


def test_podgroup_preemptibility_semi_preemptible():
    pg = {"metadata": {"name": "pg", "namespace": "ns"},
          "spec": {"minMember": 2, "queue": "q", "preemptibility": "semi-preemptible"}}
    job = job_from_podgroup(pg, {})
    assert job.semi_preemptible and job.preemptible and job.min_member == 2
    pg["spec"]["preemptibility"] = "preemptible"
    assert not job_from_podgroup(pg, {}).semi_preemptible


def _schema_causes(preemptibility: str) -> list:
    crd = podgroup_crd()
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    causes: list = []
    validate_against_schema({"spec": {"queue": "q", "preemptibility": preemptibility}},
                            version["schema"]["openAPIV3Schema"], "", causes)
    return causes


def test_the_podgroup_schema_takes_semi_preemptible_and_names_a_bad_value():
    assert _schema_causes("semi-preemptible") == []
    causes = _schema_causes("semi")
    assert causes and "preemptibility" in causes[0].field
