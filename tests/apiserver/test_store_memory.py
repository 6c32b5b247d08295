"""What the event log keeps per write: the encoded object in a bytes object of its own
size (orjson hands back a buffer of at least 4 KiB, which the log used to keep)."""

from __future__ import annotations

import tracemalloc

import orjson

from gpushare.apiserver.storage.store import Store, encode

POD = {"metadata": {"namespace": "default", "labels": {"app": "x"}},
       "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def _traced(make):  # bytes allocated by make() that stay allocated
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = make()
        return kept, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_encode_keeps_only_the_bytes_of_the_json() -> None:
    obj = {**POD, "metadata": {**POD["metadata"], "name": "p"}}
    raw, raw_size = _traced(lambda: orjson.dumps(obj))
    data, size = _traced(lambda: encode(obj))
    assert data == raw and orjson.loads(data) == obj
    assert size < len(data) + 100
    assert raw_size > 4 * len(raw)  # what orjson itself hands back for a small object


def test_the_event_log_holds_about_the_encoded_size_per_write() -> None:
    store = Store(None)

    def writes() -> Store:
        for i in range(2000):
            store.put("root", "pods", {**POD, "metadata": {**POD["metadata"],
                                                           "name": f"p{i % 100}"}})
        return store

    _, grown = _traced(writes)
    encoded = sum(len(e.data) for e in store.events)
    assert len(store.events) >= 2000
    # per event: its encoding, the object's dicts, the event itself; not 4 KiB of buffer
    assert grown / len(store.events) < 2500, (grown / len(store.events), encoded)
