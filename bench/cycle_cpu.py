"""CPU seconds per scheduling cycle on the bench's clusters, for comparing two trees.

Wall times on a shared, loaded machine say more about the load than about the code;
``time.process_time()`` around ``run_cycle`` counts only this process's own CPU. The
script reads ``gpushare`` from ``PYTHONPATH``, so one copy of it measures two trees:

    for tree in before after before after; do
        PYTHONPATH=/tmp/$tree/src python bench/cycle_cpu.py --label $tree --nodes 500 1000
    done

Per size it prints the first cycle (cold caches) and the later cycles' min and median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpushare.scheduler import Config, run_cycle
from scheduler_bench import build, next_cycle


def cycle_cpu(nodes: int, queues: int, pending: int, free: float, cycles: int) -> list[float]:
    state = build(nodes, queues, pending, free)
    config = Config()
    times: list[float] = []
    for c in range(cycles):
        if c:
            next_cycle(state, c, pending)
        t = time.process_time()
        run_cycle(state, config, 0.0)
        times.append(time.process_time() - t)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="", help="printed on each line (which tree)")
    parser.add_argument("--nodes", type=int, nargs="*", default=[500, 1000])
    parser.add_argument("--queues", type=int, default=200)
    parser.add_argument("--cycles", type=int, default=4)
    parser.add_argument("--free", type=float, default=0.05)
    args = parser.parse_args()
    for nodes in args.nodes:
        load = os.getloadavg()[0]
        times = cycle_cpu(nodes, args.queues, nodes // 2, args.free, args.cycles)
        later = times[1:] or times
        print(f"{args.label} nodes={nodes} queues={args.queues} cycles={args.cycles} "
              f"first={times[0]:.3f}s later min={min(later):.3f}s "
              f"median={statistics.median(later):.3f}s load={load:.1f}", flush=True)


if __name__ == "__main__":
    main()
