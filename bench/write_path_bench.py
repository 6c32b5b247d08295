"""What a pod's writes cost the API server in-process, as the controllers make them: the
create, the pod-grouper's annotation (a merge patch), the binding, and two status merge
patches (conditions, then the phase), each with a field manager. CPU time per write
(``time.process_time``), so a loaded machine skews every side alike; run two checkouts
against each other by alternating processes with their own ``PYTHONPATH``.

    python bench/write_path_bench.py --pods 2000 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from gpushare.apiserver.registry.api import PATCH_MERGE, Api
from gpushare.apiserver.storage.store import Store


def pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"kai.scheduler/queue": "bench"},
                         "annotations": {"gpu-fraction": "0.25"}},
            "spec": {"schedulerName": "gpushare",
                     "containers": [{"name": "main", "image": "busybox",
                                     "command": ["sleep", "1"],
                                     "resources": {"requests": {"cpu": "100m",
                                                                "memory": "128Mi"}}}]}}


def run(api: Api, prefix: str, count: int) -> dict[str, float]:
    """CPU microseconds per write, by kind of write."""
    info = api.registry("root").get("", "v1", "pods")
    assert info is not None
    spent = dict.fromkeys(("create", "annotate", "bind", "conditions", "phase"), 0.0)

    def timed(kind: str, call, *args, **kwargs) -> None:
        start = time.process_time()
        call(*args, **kwargs)
        spent[kind] += time.process_time() - start

    for i in range(count):
        name = f"{prefix}-{i}"
        timed("create", api.create, "root", info, "default", pod(name), manager="bench")
        timed("annotate", api.patch, "root", info, "default", name, PATCH_MERGE,
              {"metadata": {"annotations": {"pod-group-name": f"pg-{name}"}}},
              manager="pod-grouper")
        timed("bind", api.bind, "root", "default", name, {
            "metadata": {"name": name, "annotations": {"gpushare.io/gpu-portion": "250"}},
            "target": {"kind": "Node", "name": "node-0001"}})
        timed("conditions", api.patch, "root", info, "default", name, PATCH_MERGE,
              {"status": {"conditions": [{"type": "Initialized", "status": "True"}]}},
              "status", manager="kubelet")
        timed("phase", api.patch, "root", info, "default", name, PATCH_MERGE,
              {"status": {"phase": "Running"}}, "status", manager="kubelet")
    return {k: v / count * 1e6 for k, v in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=2000, help="pods per run")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        store = Store(f"{data}/bench.db", sync="normal", commit_thread=False)
        api = Api(store)
        runs = [run(api, f"r{i}", args.pods) for i in range(args.repeat)]
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; {args.pods} pods"
          f" per run, {args.repeat} runs; CPU us per write, min / median")
    for kind in runs[0]:
        values = [r[kind] for r in runs]
        print(f"  {kind}: {min(values):.1f} / {statistics.median(values):.1f}")
    totals = [sum(r.values()) for r in runs]
    print(f"  all five: {min(totals):.1f} / {statistics.median(totals):.1f}")


if __name__ == "__main__":
    main()
