"""Decision hashes: a fingerprint of every decision the scheduler makes on the bench's clusters.

Runs a few cycles (all five actions, settling in between as the bench does) on clusters
built by ``scheduler_bench.build`` and prints, per size and per configuration (gpushare's
defaults and ``compat: kai``), a sha256 over the sorted binds, pipelines and evictions of
every cycle, plus the cycle times (wall clock, and the process's CPU time, which a loaded
machine disturbs less). Two commits that hash the same on these clusters made the
same decisions on them: a refactoring proves itself unchanged this way.

    python bench/decision_hash.py                    # the default sizes
    python bench/decision_hash.py --sizes 10:100:10:0 200:300:100:0.1
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpushare.model.quantities import MILLI
from gpushare.scheduler import Config, run_cycle
from scheduler_bench import build, next_cycle

DEFAULT_SIZES = ("10:100:10:0", "50:100:25:0", "200:300:100:0.1", "300:300:150:0.05")
#: ``compat: kai`` searches victims without gpushare's bounds: minutes beyond these sizes.
KAI_SIZES = ("10:100:10:0", "50:100:25:0")


def decisions_of(result) -> list[str]:
    # The portion is written as a float GPU count, as when the first hashes were taken,
    # so that hashes stay comparable across commits.
    lines = [f"B {b.pod} {b.node} {b.gpu_indices} {b.portion_milli / MILLI} {b.gpu_memory_mib}"
             for b in result.binds]
    lines += [f"P {p.pod} {p.node} {p.gpu_indices} {p.portion_milli / MILLI} {p.gpu_memory_mib}"
              for p in result.pipelines]
    lines += [f"E {e.pod} {e.action}" for e in result.evictions]
    return sorted(lines)


def run(nodes: int, queues: int, pending: int, free: float, cycles: int,
        compat: str | None) -> tuple[str, list[float], list[float], int]:
    state = build(nodes, queues, pending, free)
    config = Config(compat=compat)
    digest = hashlib.sha256()
    times: list[float] = []
    cpu: list[float] = []
    count = 0
    for c in range(cycles):
        if c:
            next_cycle(state, c, pending)
        t, c0 = time.perf_counter(), time.process_time()
        result = run_cycle(state, config, 0.0)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c0)
        lines = decisions_of(result)
        count += len(lines)
        digest.update(f"cycle {c}\n".encode())
        digest.update("\n".join(lines).encode())
    return digest.hexdigest()[:16], times, cpu, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="*", default=list(DEFAULT_SIZES),
                        help="nodes:queues:pending:free, as scheduler_bench.build takes them")
    parser.add_argument("--kai-sizes", nargs="*", default=list(KAI_SIZES),
                        help="the sizes also run under compat: kai")
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--compat", nargs="*", default=["default", "kai"])
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    for size in args.sizes:
        n, q, p, f = size.split(":")
        for compat in args.compat:
            if compat == "kai" and size not in args.kai_sizes:
                continue
            digest, times, cpu, count = run(int(n), int(q), int(p), float(f), args.cycles,
                                       None if compat == "default" else compat)
            print(f"nodes={n} queues={q} pending={p} free={f} compat={compat} "
                  f"decisions={count} hash={digest} cycle min={min(times):.3f}s "
                  f"median={statistics.median(times):.3f}s cpu min={min(cpu):.3f}s "
                  f"median={statistics.median(cpu):.3f}s")


if __name__ == "__main__":
    main()
