"""Events are written once per (object, reason, message) and off the caller's thread."""

from __future__ import annotations

import time

from polling import wait

from gpushare.controllers.events import EventRecorder
from gpushare.kube.client import EVENTS, PODS, Stopper


def test_repeated_event_is_written_once_and_a_new_message_again(api):
    pod = api.create(PODS.collection("default"), {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "x"}]}})
    stopper = Stopper()
    recorder = EventRecorder(api, "test", stopper)
    recorder.start()
    for _ in range(5):
        recorder.emit(pod, "Warning", "Unschedulable", "queue q is at its limit")
    recorder.emit(pod, "Warning", "Unschedulable", "queue q has no quota")

    def events():
        return api.list(EVENTS.collection("default"))["items"]

    assert wait(lambda: len(events()) == 2)
    time.sleep(0.2)
    stored = events()
    assert sorted(e["message"] for e in stored) == ["queue q has no quota",
                                                     "queue q is at its limit"]
    assert {e["involvedObject"]["uid"] for e in stored} == {pod["metadata"]["uid"]}
    assert {e["source"]["component"] for e in stored} == {"test"}
    stopper.stop()
