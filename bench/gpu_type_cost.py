"""What per-GPU-type quotas cost a scheduling cycle: the bench's clusters as built by
``scheduler_bench.build``, run three ways, the same cycles as ``decision_hash.py`` (all
five actions, settling in between):

* ``unused``: as built (no node labels, no type entries);
* ``labels``: half the nodes labelled H100, half L40S (``nvidia.com/gpu.product``), still
  no type entries: the feature is off, as on a cluster whose nodes carry the label;
* ``used``: labelled so, and every department with a finite GPU quota gives half of it as
  its H100 quota and half as its L40S quota (``Queue.gpu_types``); a third of the pending
  jobs ask for H100, a third for L40S, the rest for either.

Prints the sizes, the machine's load, a calibration figure (CPU seconds of a fixed pure
Python loop, to compare runs on a busy machine), and per way the process CPU time per
cycle after the first (min and median) and the binds made. ``--ways unused`` runs on a
tree without the feature too (set PYTHONPATH to its sources) for the before/after figure.

    python bench/gpu_type_cost.py                    # 10:100:10:0 and 50:100:25:0
    python bench/gpu_type_cost.py --sizes 200:300:100:0.1 --cycles 5
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpushare.model.queue import UNLIMITED
from gpushare.scheduler import ClusterState
from scheduler_bench import build, calibration, cycles_cpu

LABEL = "nvidia.com/gpu.product"
PRODUCTS = ("NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S")


def label_nodes(state: ClusterState) -> None:
    for i, name in enumerate(sorted(state.nodes)):
        node = state.nodes[name]
        state.upsert_node(dataclasses.replace(node, labels={**node.labels,
                                                            LABEL: PRODUCTS[i % 2]}))


def use_types(state: ClusterState) -> int:
    """Half of every finite department GPU quota per type; a third of the pending pods
    ask for H100, a third for L40S."""
    from gpushare.model.queue import ResourceSpec

    changed = 0
    for queue in list(state.queues.values()):
        spec = queue.gpu
        if queue.parent is not None or spec.quota == UNLIMITED or spec.quota <= 0:
            continue
        half = ResourceSpec(spec.quota / 2, UNLIMITED, spec.over_quota_weight)
        state.upsert_queue(dataclasses.replace(
            queue, gpu_types={"H100": half, "L40S": half}, children=[]))
        changed += 1
    ask_types(state)
    return changed


def ask_types(state: ClusterState) -> None:
    """New pending pods (before any cycle saw them) of a third of the jobs (by a hash of
    the job's name) ask for H100, of another third for L40S."""
    for name, job in state.jobs.items():
        kind = zlib.crc32(name.encode()) % 3
        if kind == 2 or name in ASKED:
            continue
        ASKED.add(name)
        for key in job.pods:
            pod = state.pods[key]
            if pod.node is None:
                pod.node_selector = {LABEL: PRODUCTS[kind]}


#: Jobs whose pods were given a type already (never changed after a cycle saw them).
ASKED: set[str] = set()


def run(size: str, cycles: int, way: str) -> tuple[list[float], int, int]:
    nodes, queues, pending, free = size.split(":")
    state = build(int(nodes), int(queues), int(pending), float(free))
    typed = 0
    ASKED.clear()
    if way != "unused":
        label_nodes(state)
    if way == "used":
        typed = use_types(state)
    cpu, binds = cycles_cpu(state, cycles, int(pending),
                            ask_types if way == "used" else None)
    return cpu, binds, typed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["10:100:10:0", "50:100:25:0"])
    parser.add_argument("--cycles", type=int, default=6)
    parser.add_argument("--ways", nargs="+", default=["unused", "labels", "used"],
                        choices=["unused", "labels", "used"])
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}; "
          f"calibration {calibration():.3f}s", flush=True)
    for size in args.sizes:
        for way in args.ways:
            cpu, binds, typed = run(size, args.cycles, way)
            later = cpu[1:] or cpu
            print(f"size={size} way={way} queues-with-types={typed} binds={binds} "
                  f"cpu first={cpu[0]:.3f}s later min={min(later):.3f}s "
                  f"median={statistics.median(later):.3f}s "
                  f"(load {os.getloadavg()[0]:.2f}, calibration {calibration():.3f}s)",
                  flush=True)


if __name__ == "__main__":
    main()
