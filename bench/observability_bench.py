"""What the metrics cost where it matters.

1. The scheduler cycle: the loop's `timed_cycle` (actions one by one on the shell's clock,
   noting which action placed each pod) plus the metric updates (decisions counted, queue
   gauges set for the queues whose figures changed, cycle histograms), against the core's
   plain `run_cycle`, on two identical synthetic clusters (bench/scheduler_bench.py's).
2. The API server: parsing one agent's push (a node with P pods) and rendering /metrics
   with N agents' pushes merged, i.e. the work a push and a scrape put on its event loop.

    python bench/observability_bench.py                     # 500 nodes; 100 agents x 40 pods
    python bench/observability_bench.py --nodes 1000 --agents 500 --pods 100
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from prometheus_client import generate_latest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpushare.agent.gpu.gpu_share import GpuShare
from gpushare.agent.node.inventory import declared_gpus
from gpushare.agent.runtime.telemetry import AgentMetrics, ContainerGroup, ContainerUsage, PodView
from gpushare.apiserver.telemetry.pushes import ComponentMetrics
from gpushare.controllers.scheduling.scheduler_loop import figures_of, timed_cycle
from gpushare.controllers.scheduling.scheduler_metrics import SchedulerMetrics
from gpushare.scheduler import Config, run_cycle
from scheduler_bench import build, settle

ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")


def cycle_cost(nodes: int, queues: int, cycles: int) -> None:
    config = Config(actions=ACTIONS)
    plain, observed = build(nodes, queues, nodes // 2), build(nodes, queues, nodes // 2)
    metrics = SchedulerMetrics()
    previous: dict[str, dict[str, dict[str, str]]] = {}
    for name, queue in observed.queues.items():
        metrics.queue_spec(name, queue)
    t_plain, t_obs, t_updates = [], [], []
    decisions = 0
    for c in range(cycles):
        if c:
            settle(plain)
            settle(observed)
        t = time.perf_counter()
        a = run_cycle(plain, config, 0.0)
        t_plain.append(time.perf_counter() - t)
        t = time.perf_counter()
        timed = timed_cycle(observed, config, 0.0)
        u = time.perf_counter()
        metrics.decided(timed.result, timed.placed_by)
        reports = {n: figures_of(r) for n, r in timed.result.queues.items()}
        if reports != previous:
            metrics.queue_reports(timed.result.queues,
                                  [n for n, r in reports.items() if previous.get(n) != r])
            previous = reports
        metrics.cycle(time.perf_counter() - t, timed.action_seconds, True)
        end = time.perf_counter()
        t_updates.append(end - u)
        t_obs.append(end - t)
        decisions += len(timed.result.binds) + len(timed.result.evictions)
        assert len(a.binds) == len(timed.result.binds), "the two clusters must decide alike"
    ratios = [o / p for o, p in zip(t_obs, t_plain, strict=True)]
    print(f"cycle nodes={nodes} pods={len(observed.pods)} queues={len(observed.queues)} "
          f"cycles={cycles} decisions={decisions} | "
          f"run_cycle median={statistics.median(t_plain):.3f}s "
          f"min={min(t_plain):.3f}s | timed_cycle+metrics median={statistics.median(t_obs):.3f}s "
          f"min={min(t_obs):.3f}s | ratio median={statistics.median(ratios):.3f} "
          f"min={min(ratios):.3f} | metric updates alone median="
          f"{statistics.median(t_updates) * 1000:.2f}ms max={max(t_updates) * 1000:.2f}ms")


def agent_exposition(node: str, pods: int) -> bytes:
    inventory = declared_gpus(node, "8xH100")
    m = AgentMetrics(node, inventory, "mps,nvml-watchdog")
    views, usage = [], {}
    for i in range(pods):
        device = inventory.devices[i % 8]
        share = GpuShare((device,), 0.25, 20000)
        key = f"team-{i % 10}/pod-{i}"
        views.append(PodView(f"team-{i % 10}", f"pod-{i}", share,
                             [ContainerGroup(key, "main", 1000 + i)]))
        usage[(key, "main")] = ContainerUsage(0.5, 512 << 20)
    m.pods(views, usage, inventory)
    m.gpu_memory({d.index: 10 << 30 for d in inventory.devices},
                 {f"team-{i % 10}/pod-{i}": {i % 8: 4096} for i in range(pods)})
    return generate_latest(m.registry)


def server_cost(agents: int, pods: int, repeats: int) -> None:
    text = agent_exposition("node-0", pods)
    c = ComponentMetrics()
    push = []
    for i in range(agents):
        body = text.replace(b'node="node-0"', f'node="node-{i}"'.encode())
        t = time.perf_counter()
        c.push("agent", f"node-{i}", body, "5")
        push.append(time.perf_counter() - t)
    render = []
    size = 0
    for _ in range(repeats):
        t = time.perf_counter()
        size = len(c.render())
        render.append(time.perf_counter() - t)
    print(f"server agents={agents} pods/agent={pods} push={len(text)} bytes | parse one push "
          f"median={statistics.median(push) * 1000:.2f}ms min={min(push) * 1000:.2f}ms | "
          f"render /metrics ({size} bytes) median={statistics.median(render) * 1000:.1f}ms "
          f"min={min(render) * 1000:.1f}ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="*", default=[500])
    parser.add_argument("--queues", type=int, default=200)
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--pods", type=int, default=40)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()} on {os.cpu_count()} cores")
    for n in args.nodes:
        cycle_cost(n, args.queues, args.cycles)
    server_cost(args.agents, args.pods, 5)
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
