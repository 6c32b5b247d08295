"""What field ownership costs a create, in-process: ``Api.create`` of the apiserver
bench's pod with ``managedFields`` recorded (a field manager, as every client sends one)
against the same create without a manager (nothing recorded), alternating in one run, in
CPU time (``time.process_time``), so a loaded machine skews both sides alike. Also the
stored object's size with and without its FieldsV1 tree.

    python bench/managed_fields_bench.py --pods 3000 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import orjson

from gpushare.apiserver.registry.api import Api
from gpushare.apiserver.schema import managed, schemas
from gpushare.apiserver.storage.store import Store


def pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"kai.scheduler/queue": "bench"},
                         "annotations": {"gpu-fraction": "0.25"}},
            "spec": {"containers": [{"name": "main", "image": "busybox",
                                     "resources": {"requests": {"cpu": "100m"}}}]}}


def creates(api: Api, prefix: str, count: int, manager: str) -> float:
    """CPU microseconds per create."""
    info = api.registry("root").get("", "v1", "pods")
    assert info is not None
    start = time.process_time()
    for i in range(count):
        api.create("root", info, "default", pod(f"{prefix}-{i}"), manager=manager)
    return (time.process_time() - start) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=3000, help="creates per run and side")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        store = Store(f"{data}/bench.db", sync="normal", commit_thread=False)
        api = Api(store)
        sides: dict[str, list[float]] = {"with managedFields": [], "without": []}
        for run in range(args.repeat):
            sides["with managedFields"].append(creates(api, f"m{run}", args.pods, "bench"))
            sides["without"].append(creates(api, f"n{run}", args.pods, ""))
        print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; "
              f"{args.pods} creates per side and run, {args.repeat} runs")
        for side, values in sides.items():
            print(f"{side}: min {min(values):.1f} us, median {statistics.median(values):.1f} us "
                  f"CPU per create")
        ratio = statistics.median(sides["with managedFields"]) / statistics.median(
            sides["without"])
        print(f"ratio (median): {ratio:.2f}")
        info = api.registry("root").get("", "v1", "pods")
        assert info is not None
        stored = api.create("root", info, "default", pod("sized"), manager="bench")
        bare = {**stored, "metadata": {k: v for k, v in stored["metadata"].items()
                                       if k != "managedFields"}}
        tree = managed.fields_tree(stored, schemas.kind_schema("", "v1", "Pod"))
        print(f"stored pod: {len(orjson.dumps(stored))} bytes with managedFields, "
              f"{len(orjson.dumps(bare))} without; FieldsV1 {len(orjson.dumps(tree))} bytes")


if __name__ == "__main__":
    main()
