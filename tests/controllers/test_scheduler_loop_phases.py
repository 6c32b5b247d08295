"""The scheduler loop's memory of PodGroup phases written."""

from __future__ import annotations

from kubernetes import client as k8s_client

from gpushare.controllers.events import EventRecorder
from gpushare.controllers.scheduling.scheduler_loop import SchedulerLoop
from gpushare.kube.client import KubeClient, Stopper
from gpushare.kube.informers import InformerFactory


def test_a_deleted_podgroup_forgets_its_phase_so_one_made_again_gets_its_own():
    client = KubeClient(k8s_client.ApiClient())  # never reached: nothing is started
    stopper = Stopper()
    loop = SchedulerLoop(client, InformerFactory(client, stopper), stopper,
                         EventRecorder(client, "test", stopper))
    loop._phases["ns/pg"] = "Running"
    loop._phases["ns/other"] = "Running"
    loop._deltas.append(("podgroup", "DELETED", {"metadata": {"namespace": "ns", "name": "pg"}}))
    loop.drain()
    assert loop._phases == {"ns/other": "Running"}
