"""Informers against the real API server: list+watch, resume, relist on 410; the work
queue's once-at-a-time guarantee."""

from __future__ import annotations

import threading
import time

from polling import wait

from gpushare.kube.client import PODS, Stopper
from gpushare.kube.informer import Informer, WorkQueue, start_workers


def pod(name):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "x"}]}}


def recorder(informer):
    seen = []
    informer.add_handler(lambda kind, obj, old: seen.append((kind, obj["metadata"]["name"])))
    return seen


def test_lists_then_watches_and_resumes_after_a_dropped_connection(api):
    api.create(PODS.collection("default"), pod("before"))
    stopper = Stopper()
    informer = Informer(api, PODS, stopper)
    seen = recorder(informer)
    informer.start()
    assert informer.wait_synced(10)
    assert informer.get("default/before") is not None
    api.create(PODS.collection("default"), pod("during"))
    assert wait(lambda: ("ADDED", "during") in seen)
    informer.drop_connection()
    api.create(PODS.collection("default"), pod("after"))
    api.delete(PODS.item("before", "default"))
    assert wait(lambda: ("DELETED", "before") in seen and ("ADDED", "after") in seen)
    assert informer.relists == 1  # resumed from its version, no second list
    stopper.stop()
    informer.stop()


def test_a_compacted_version_makes_the_informer_list_again(api):
    old_version = api.list(PODS.collection("default"))["metadata"]["resourceVersion"]
    for i in range(12):  # the server keeps only the last 5 events
        api.create(PODS.collection("default"), pod(f"p{i}"))
    stopper = Stopper()
    informer = Informer(api, PODS, stopper)
    seen = recorder(informer)
    informer.start(resume_from=old_version)
    assert wait(lambda: len(informer) == 12)
    assert informer.relists == 1
    assert sorted(name for kind, name in seen if kind == "ADDED") == sorted(
        f"p{i}" for i in range(12))
    stopper.stop()
    informer.stop()


def test_a_field_selector_limits_the_list_and_the_watch(api):
    """The agent's informer: only the pods bound to its node, in the list and on the watch
    (binding one later arrives as a change)."""
    on_n1 = {**pod("on-n1"), "spec": {**pod("x")["spec"], "nodeName": "n1"}}
    api.create(PODS.collection("default"), on_n1)
    api.create(PODS.collection("default"), {**pod("on-n2"),
                                            "spec": {**pod("x")["spec"], "nodeName": "n2"}})
    api.create(PODS.collection("default"), pod("unbound"))
    stopper = Stopper()
    informer = Informer(api, PODS, stopper, field_selector="spec.nodeName=n1")
    seen = recorder(informer)
    informer.start()
    assert informer.wait_synced(10)
    assert informer.keys() == ["default/on-n1"]
    api.create(PODS.collection("default"), {**pod("later"),
                                            "spec": {**pod("x")["spec"], "nodeName": "n1"}})
    api.create(PODS.collection("default"), {**pod("elsewhere"),
                                            "spec": {**pod("x")["spec"], "nodeName": "n2"}})
    # A bound pod's delete is graceful: its node's agent sees the deletionTimestamp.
    api.delete(PODS.item("on-n1", "default"))
    assert wait(lambda: ("MODIFIED", "on-n1") in seen and ("ADDED", "later") in seen), seen
    assert {name for _, name in seen} == {"later", "on-n1"}
    assert sorted(informer.keys()) == ["default/later", "default/on-n1"]
    assert informer.get("default/on-n1")["metadata"].get("deletionTimestamp")
    stopper.stop()
    informer.stop()


def test_work_queue_never_runs_a_key_twice_at_once_and_reruns_dirty_keys():
    queue = WorkQueue()
    stopper = Stopper()
    running: set[str] = set()
    overlaps = []
    runs: list[str] = []
    lock = threading.Lock()

    def reconcile(key):
        with lock:
            if key in running:
                overlaps.append(key)
            running.add(key)
        time.sleep(0.02)
        with lock:
            running.discard(key)
            runs.append(key)

    start_workers(queue, reconcile, stopper, "test", 4)
    queue.add("a")
    time.sleep(0.005)
    queue.add("a")  # while "a" runs: it runs once more afterwards, not concurrently
    queue.add("a")
    queue.add("b")
    assert wait(lambda: runs.count("a") == 2 and "b" in runs)
    time.sleep(0.1)
    stopper.stop()
    assert overlaps == []
    assert runs.count("a") == 2


def test_failed_reconcile_is_retried_later():
    queue = WorkQueue()
    stopper = Stopper()
    attempts = []

    def reconcile(key):
        attempts.append(key)
        if len(attempts) < 3:
            raise RuntimeError("not yet")

    start_workers(queue, reconcile, stopper, "test", 1)
    queue.add("k")
    assert wait(lambda: len(attempts) == 3)
    stopper.stop()


def test_a_relist_gives_the_deletions_of_the_gap_before_the_additions(api):
    """What was deleted while the informer was away comes first: a GPU share freed then
    is free before the pod bound to it arrives (the node agent's ledger relies on it)."""
    api.create(PODS.collection("default"), pod("victim"))
    stopper = Stopper()
    informer = Informer(api, PODS, stopper)
    seen = recorder(informer)
    informer.start()
    assert informer.wait_synced(10)
    stopper.stop()
    informer.stop()
    api.delete(PODS.item("victim", "default"), grace_period_seconds=0)
    api.create(PODS.collection("default"), pod("successor"))
    seen.clear()
    informer._relist()  # what the informer does after a 410 (the server restarted)
    assert seen == [("DELETED", "victim"), ("ADDED", "successor")]
