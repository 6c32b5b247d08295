"""Attack: fill the control plane's disk (any writer can: big ConfigMaps, Events). Without
a space quota every commit fails once the disk is full, deletes included, and the control
plane is stopped for good. With it the store stops growing before the disk is full, with
room kept: an alarm, deletes and shrinking writes still go through, and writes resume by
themselves once room is freed. The disk is a real limit here (RLIMIT_FSIZE on the
server process)."""

from __future__ import annotations

import resource
import signal
from pathlib import Path

from apiserver_proc import start, stop

CM = "/api/v1/namespaces/default/configmaps"
BLOB = "x" * 100_000
QUOTA = 2_000_000


def _alarm(client) -> float:  # type: ignore[no-untyped-def]
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("apiserver_storage_space_alarm "):
            return float(line.split()[1])
    raise AssertionError("no apiserver_storage_space_alarm on /metrics")


def test_a_full_store_keeps_deletes_and_recovers_by_itself(tmp_path: Path) -> None:
    proc, client = start(tmp_path)
    stop(proc, client)
    room = max(p.stat().st_size for p in tmp_path.glob("state.db*")) + 16_000_000

    def small_disk() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (room, resource.RLIM_INFINITY))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    proc, client = start(tmp_path, "--storage-quota-bytes", str(QUOTA), preexec=small_disk)
    try:
        assert _alarm(client) == 0
        created: list[str] = []
        answer = None
        for i in range(200):
            answer = client.post(CM, json={"metadata": {"name": f"fill-{i}"},
                                           "data": {"blob": BLOB}})
            if answer.status_code != 201:
                break
            created.append(f"fill-{i}")
        assert answer is not None and answer.status_code == 507, answer.text
        assert answer.json()["reason"] == "InsufficientStorage"
        assert "quota" in answer.json()["message"]
        assert 10 <= len(created) < 200
        assert _alarm(client) == 1
        # nothing of the refused write is there
        assert client.get(f"{CM}/fill-{len(created)}").status_code == 404
        # while the alarm is up even a small new object waits ...
        assert client.post(CM, json={"metadata": {"name": "tiny"}}).status_code == 507
        # ... but a shrinking write and deletes go through while the alarm is up
        shrunk = client.get(f"{CM}/{created[0]}").json()
        shrunk["data"] = {"blob": "small"}
        assert client.put(f"{CM}/{created[0]}", json=shrunk).status_code == 200
        for name in created[1:6]:
            assert client.delete(f"{CM}/{name}").status_code == 200
        # room again: writes resume with no operator action
        answer = client.post(CM, json={"metadata": {"name": "after"}, "data": {"blob": BLOB}})
        assert answer.status_code == 201, answer.text
        assert _alarm(client) == 0
        assert client.get("/readyz").status_code == 200
    finally:
        stop(proc, client)
