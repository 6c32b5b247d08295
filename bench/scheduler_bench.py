"""Scheduler core benchmark: full cycles on large synthetic clusters.

Builds a cluster of N nodes x 8 GPUs with about 35 running pods per node (whole-GPU,
fractional and CPU-only pods), a two-level queue tree, and a mix of pending whole,
fractional and gang jobs; then runs full cycles (all actions) on the live state, settling
in between like the scheduler loop would (collecting garbage between cycles, as it does),
and prints seconds per cycle (median), pods
placed per second, the fair-share division time and the sizes; then the CPU seconds per
cycle (``time.process_time()``, which a loaded machine disturbs less than wall time), the
process's peak resident memory, the load average and a calibration figure (a fixed
pure-Python loop timed in CPU seconds, to compare runs made at different loads or on
other machines). gpushare is read from ``PYTHONPATH``, so one copy of this script measures
two trees (``PYTHONPATH=/tmp/base/src python bench/scheduler_bench.py ...``).

    python bench/scheduler_bench.py                 # 500, 1000 and 4000 nodes
    python bench/scheduler_bench.py --nodes 5000 --queues 1000 --cycles 3
    python bench/scheduler_bench.py --nodes 500 1000 --plot /tmp/cycles.png
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import random
import resource
import statistics
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

from gpushare.controllers.scheduling.heap import HeapKeeper
from gpushare.model import GpuRequest, Job, Node, Pod, PodStatus, Queue, ResourceSpec
from gpushare.model.quantities import MIB
from gpushare.scheduler import ClusterState, Config, run_cycle
from gpushare.scheduler.session import Session
from gpushare.simulator.plots import check_path, line_plot

UNL = Fraction(-1)
GPUS_PER_NODE = 8


def build(nodes: int, queues: int, pending_jobs: int, free: float = 0.05,
          seed: int = 7) -> ClusterState:
    rnd = random.Random(seed)
    state = ClusterState()
    for i in range(nodes):
        state.upsert_node(Node(f"node-{i:05d}", gpus=GPUS_PER_NODE, gpu_memory_mib=81920,
                               cpu_millis=128000, memory_bytes=1024 * 1024 * MIB, max_pods=110))
    departments = max(1, queues // 20)
    per_dept_gpu = Fraction(nodes * GPUS_PER_NODE, departments)
    for d in range(departments):
        state.upsert_queue(Queue(f"dept-{d:03d}", resources={
            "gpu": ResourceSpec(per_dept_gpu, UNL, Fraction(1)),
            "cpu": ResourceSpec(UNL, UNL, Fraction(1)),
            "memory": ResourceSpec(UNL, UNL, Fraction(1)),
        }))
    leaves = []
    for t in range(queues):
        d = t % departments
        name = f"team-{t:04d}"
        leaves.append(name)
        state.upsert_queue(Queue(name, parent=f"dept-{d:03d}", created_at=float(t), resources={
            "gpu": ResourceSpec(per_dept_gpu / (queues // departments or 1), UNL, Fraction(1)),
            "cpu": ResourceSpec(UNL, UNL, Fraction(1)),
            "memory": ResourceSpec(UNL, UNL, Fraction(1)),
        }))
    job_id = 0

    def new_job(queue: str, priority: int, min_member: int) -> Job:
        nonlocal job_id
        job_id += 1
        job = Job(f"job-{job_id:07d}", "bench", queue, priority=priority,
                  preemptible=priority < 100, min_member=min_member,
                  created_at=float(-job_id))
        state.upsert_job(job)
        return job

    # Running pods, about 35 per busy node: three 2-GPU pods, eight quarter-GPU pods on the
    # last two GPUs and 24 CPU-only pods. A share of the nodes (``free``) is left empty.
    for i in range(nodes):
        node = f"node-{i:05d}"
        if rnd.random() < free:
            continue
        for k in range(3):
            job = new_job(rnd.choice(leaves), rnd.choice((50, 50, 100)), 1)
            state.upsert_pod(Pod(f"{job.name}-0", "bench", job.key, 0,
                                 gpu=GpuRequest(whole=2), cpu_millis=8000,
                                 memory_bytes=64 * 1024 * MIB, status=PodStatus.RUNNING,
                                 node=node, gpu_indices=(2 * k, 2 * k + 1), portion=1000))
        for k in range(8):
            job = new_job(rnd.choice(leaves), 50, 1)
            state.upsert_pod(Pod(f"{job.name}-0", "bench", job.key, 0,
                                 gpu=GpuRequest(portion=250), cpu_millis=1000,
                                 memory_bytes=8 * 1024 * MIB, status=PodStatus.RUNNING,
                                 node=node, gpu_indices=(6 + k // 4,), portion=250))
        for _ in range(24):
            job = new_job(rnd.choice(leaves), 50, 1)
            state.upsert_pod(Pod(f"{job.name}-0", "bench", job.key, 0, cpu_millis=500,
                                 memory_bytes=2 * 1024 * MIB, status=PodStatus.RUNNING,
                                 node=node))
    add_pending(state, rnd, leaves, pending_jobs, new_job)
    return state


def add_pending(state, rnd, leaves, count, new_job) -> None:
    for _ in range(count):
        kind = rnd.random()
        queue = rnd.choice(leaves)
        if kind < 0.5:
            job = new_job(queue, 50, 1)
            pods = [(GpuRequest(whole=rnd.choice((1, 1, 2))), 4000)]
        elif kind < 0.8:
            job = new_job(queue, 50, 1)
            pods = [(GpuRequest(portion=rnd.choice((250, 500))), 1000)]
        else:
            size = rnd.choice((2, 4, 8))
            job = new_job(queue, 50, size)
            pods = [(GpuRequest(whole=1), 4000)] * size
        for k, (gpu, cpu) in enumerate(pods):
            state.upsert_pod(Pod(f"{job.name}-{k}", "bench", job.key, k, gpu=gpu,
                                 cpu_millis=cpu, memory_bytes=16 * 1024 * MIB))


def calibration() -> float:
    """Seconds a fixed pure-Python loop takes now: printed beside the results, so that
    figures taken on a loaded or a different machine can be put side by side."""
    t = time.process_time()
    total = 0
    for i in range(2_000_000):
        total += i * i % 7
    return time.process_time() - t


def peak_rss_mib() -> float:
    """The process's peak resident memory so far (MiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def settle(state: ClusterState) -> None:
    for pod in list(state.pods.values()):
        if pod.status is PodStatus.BINDING:
            state.set_pod(pod, PodStatus.RUNNING, pod.node, pod.gpu_indices, pod.portion)
        elif pod.status in (PodStatus.RELEASING, PodStatus.PIPELINED):
            state.set_pod(pod, PodStatus.PENDING)


def next_cycle(state: ClusterState, c: int, pending: int) -> None:
    """Between cycles: what was decided settles, and new work arrives (a quarter of the
    first backlog, seeded by the cycle number), as it would in a live cluster."""
    settle(state)
    rnd = random.Random(c)
    leaves = [q for q in state.queues if q.startswith("team-")]
    counter = [len(state.jobs)]

    def new_job(queue, priority, min_member):
        counter[0] += 1
        job = Job(f"late-{c}-{counter[0]}", "bench", queue, priority=priority,
                  preemptible=priority < 100, min_member=min_member)
        state.upsert_job(job)
        return job

    add_pending(state, rnd, leaves, pending // 4, new_job)


def cycles_cpu(state: ClusterState, cycles: int, pending: int,
               between: Callable[[ClusterState], object] | None = None,
               ) -> tuple[list[float], int]:
    """CPU seconds of each of `cycles` cycles on `state` (``next_cycle`` between them, then
    `between`, if given), and the pods bound in all."""
    cpu: list[float] = []
    binds = 0
    for c in range(cycles):
        if c:
            next_cycle(state, c, pending)
            if between is not None:
                between(state)
        c0 = time.process_time()
        result = run_cycle(state, Config(), 0.0)
        cpu.append(time.process_time() - c0)
        binds += len(result.binds)
    return cpu, binds


def bench(nodes: int, queues: int, pending: int, cycles: int, actions: tuple[str, ...],
          free: float, budget: int | None = None, placement: str = "binpack",
          reserve_after: float | None = None, options: dict[str, object] | None = None,
          semi: int = 0) -> list[float]:
    """Run the cycles, print one line of figures, return each cycle's duration (s).

    ``options`` are further ``Config`` fields (an opt-in feature under measure); with
    ``semi`` every semi-th job (in name order) is made semi-preemptible."""
    t0 = time.perf_counter()
    state = build(nodes, queues, pending, free)
    if semi:
        for key in sorted(state.jobs)[::semi]:
            state.upsert_job(dataclasses.replace(state.jobs[key], semi_preemptible=True))
    build_s = time.perf_counter() - t0
    extra = {} if budget is None else {"victimSearchBudget": budget}
    config = Config(actions=actions, gpu_placement=placement, extra=extra,
                    reservation_after=reserve_after, **(options or {}))  # type: ignore[arg-type]
    times, cpu, placed = [], [], []
    decisions = hashlib.sha256()
    division = []
    heap = HeapKeeper()
    searched: list[str] = []
    for c in range(cycles):
        if c:
            next_cycle(state, c, pending)
        t = time.perf_counter()
        Session(state, config, 0.0)
        division.append(time.perf_counter() - t)
        t, c0 = time.perf_counter(), time.process_time()
        result = run_cycle(state, config, 0.0)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c0)
        heap.between_cycles()  # as the scheduler loop does after each cycle
        placed.append(len(result.binds) + len(result.pipelines))
        decisions.update(repr((result.binds, result.pipelines, result.evictions)).encode())
        searched.append(" ".join(
            f"{name}:{f['succeeded']}/{f['jobs']}jobs,{f['steps']}steps,{f['work']}work"
            + ("(budget out)" if f["budget_ran_out"] else "")
            for name, f in result.searches.items() if f["jobs"]
        ) or "-")
    running = sum(1 for p in state.pods.values() if p.node is not None)
    cycle = statistics.median(times)
    print(
        f"nodes={nodes} gpus={nodes * GPUS_PER_NODE} pods={len(state.pods)} "
        f"actions={','.join(actions)} placement={placement} free-nodes={free:.0%} "
        f"(on nodes {running}) queues={len(state.queues)} pending_jobs={pending} "
        f"build={build_s:.1f}s | cycle median={cycle:.3f}s "
        f"(all {', '.join(f'{x:.3f}' for x in times)}) "
        f"placed/cycle={statistics.median(placed):.0f} "
        f"placements/s={sum(placed) / sum(times):.0f} "
        f"fair-share division median={statistics.median(division) * 1000:.1f}ms"
    )
    later = cpu[1:] or cpu
    print(f"  cpu per cycle: first={cpu[0]:.3f}s later min={min(later):.3f}s "
          f"median={statistics.median(later):.3f}s (all {', '.join(f'{x:.3f}' for x in cpu)}) "
          f"placements per cpu-s={sum(placed) / sum(cpu):.0f} peak rss={peak_rss_mib():.0f}MiB "
          f"load={os.getloadavg()[0]:.2f} calibration={calibration():.3f}s")
    if reserve_after is not None:
        held = {n for r in state.reservations.values() for n in r.nodes}
        print(f"  reservations after the last cycle: {len(state.reservations)} job(s) "
              f"holding {len(held)} node(s)")
    budget_text = "default" if budget is None else budget or "none"
    print(f"  decisions hash: {decisions.hexdigest()[:16]}")
    print(f"  victim searches per cycle (succeeded/searched, budget {budget_text}): "
          + " | ".join(searched))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="*", default=[500, 1000, 4000])
    parser.add_argument("--queues", type=int, default=200)
    parser.add_argument("--pending", type=int, default=0, help="pending jobs (default nodes/2)")
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--free", type=float, default=0.05,
                        help="share of nodes left empty (the rest hold ~35 pods each)")
    parser.add_argument("--actions", default="allocate,consolidation,reclaim,preempt,"
                        "stalegangeviction")
    parser.add_argument("--search-budget", type=int, default=None,
                        help="victimSearchBudget (units of victim search work per action "
                        "and cycle; "
                        "0: no bound; default: the scheduler's default)")
    parser.add_argument("--placement", default="binpack",
                        help="GPU placement strategy (binpack, spread, fgd, fragmentation)")
    parser.add_argument("--reserve-after", type=float, default=None,
                        help="reserve nodes for jobs waiting this many seconds (the "
                        "config's reservation.afterSeconds; default: no reservations)")
    parser.add_argument("--job-aging", default=None, metavar="STEP:MAXBOOST",
                        help="configure jobAging (seconds per step, priority points at most);"
                        " the bench's jobs were created up to (job count) seconds before"
                        " its clock")
    parser.add_argument("--semi-every", type=int, default=0, metavar="N",
                        help="make every N-th job semi-preemptible (0: none)")
    parser.add_argument("--plot", type=Path, default=None,
                        help="also draw each size's cycle durations into this .png or .svg")
    args = parser.parse_args()
    if args.plot is not None:
        check_path(args.plot)
    print(f"load average before: {os.getloadavg()} calibration loop: {calibration():.3f}s "
          "cpu")
    options: dict[str, object] = {}
    if args.job_aging:
        step, boost = args.job_aging.split(":")
        options["job_aging"] = (float(step), int(boost))
    series: dict[str, list[tuple[float, float]]] = {}
    for n in args.nodes:
        times = bench(n, args.queues, args.pending or n // 2, args.cycles,
                      tuple(args.actions.split(",")), args.free, args.search_budget,
                      args.placement, args.reserve_after, options, args.semi_every)
        series[f"{n} nodes"] = [(c + 1, t) for c, t in enumerate(times)]
    print(f"load average after: {os.getloadavg()} calibration loop: {calibration():.3f}s cpu")
    if args.plot is not None:
        actions = len(args.actions.split(","))
        line_plot(args.plot, series, title=f"scheduler cycles: {actions} actions, "
                  f"{args.placement}, {args.free:.0%} of nodes free",
                  xlabel="cycle", ylabel="duration (s)")
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
