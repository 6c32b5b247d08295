"""What queue lending limits cost a scheduling cycle: the bench's clusters as built by
``scheduler_bench.build``, run as is and again with a lending limit of half the GPU quota on
every queue with a finite one (``ResourceSpec.lending_limit``), the same cycles as
``decision_hash.py`` (all five actions, settling in between). Prints the process CPU time
per cycle (min and median) of both and how many binds each made.

    python bench/lending_cost.py                     # 10:100:10:0 and 50:100:25:0
    python bench/lending_cost.py --sizes 200:300:100:0.1
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpushare.model.quantities import GPU
from gpushare.model.queue import UNLIMITED
from gpushare.scheduler import ClusterState
from scheduler_bench import build, cycles_cpu


def with_lending(state: ClusterState) -> int:
    """Give every queue with a finite GPU quota a lending limit of half of it."""
    changed = 0
    for queue in list(state.queues.values()):
        spec = queue.gpu
        if spec.quota == UNLIMITED or spec.quota <= 0:
            continue
        resources = dict(queue.resources)
        resources[GPU] = dataclasses.replace(spec, lending_limit=spec.quota / 2)
        state.upsert_queue(dataclasses.replace(queue, resources=resources, children=[]))
        changed += 1
    return changed


def run(size: str, cycles: int, lending: bool) -> tuple[list[float], int, int]:
    nodes, queues, pending, free = size.split(":")
    state = build(int(nodes), int(queues), int(pending), float(free))
    limited = with_lending(state) if lending else 0
    cpu, binds = cycles_cpu(state, cycles, int(pending))
    return cpu, binds, limited


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["10:100:10:0", "50:100:25:0"])
    parser.add_argument("--cycles", type=int, default=6)
    args = parser.parse_args()
    for size in args.sizes:
        for lending in (False, True):
            cpu, binds, limited = run(size, args.cycles, lending)
            print(f"size={size} lending={'half-quota' if lending else 'unset'} "
                  f"queues-with-limit={limited} binds={binds} cpu min={min(cpu):.3f}s "
                  f"median={statistics.median(cpu):.3f}s")


if __name__ == "__main__":
    main()
