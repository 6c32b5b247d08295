"""Trace benchmark: the FGD fill experiment (ATC'23) on the Alibaba openb trace.

For each pod list and policy, ``--seeds`` fill runs (pods shuffled with the seed, re-sampled
to 130 % of GPU capacity, no departures) over the 1,213 GPU nodes; prints GPU allocation at
100 % and 130 % of arrived demand (mean, standard deviation, min, max) beside the published
means, the placement speed, and the machine's load. Results are appended as JSON lines to
``--out`` (one per run), and ``--plot-dir`` gets one allocation-curve plot per pod list.

    python bench/trace_bench.py                                   # the full matrix
    python bench/trace_bench.py --lists default --seeds 3 --policies fgd,fragmentation
    python bench/trace_bench.py --trace-dir PATH/cluster-trace-gpu-v2023/csv

The trace is not shipped: get ``cluster-trace-gpu-v2023`` from github.com/alibaba/clusterdata
(see docs/traces.md); the default folder is the shared copy ``/work/shared/traces/openb``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from gpushare.simulator.fill import POLICIES, run_fill
from gpushare.simulator.plots import line_plot
from gpushare.simulator.traces import read_nodes, read_pods

DEFAULT_DIR = Path("/work/shared/traces/openb")
LISTS = ("default", "gpushare100", "multigpu50", "gpuspec33")
BENCH_POLICIES = ("random", "binpack", "spread", "fgd", "fragmentation")
#: Published means at 130 % arrived (hkust-adsl simulator, expected results), default list.
PUBLISHED_130 = {"FGD": 95.39, "BestFit": 93.08, "GpuPacking": 92.00,
                 "GpuClustering": 91.88, "DotProd": 90.85, "Random": 87.47}
PUBLISHED_100 = {"FGD": 95.23, "BestFit": 92.86}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace-dir", type=Path, default=DEFAULT_DIR)
    ap.add_argument("--lists", default=",".join(LISTS))
    ap.add_argument("--policies", default=",".join(BENCH_POLICIES))
    ap.add_argument("--seeds", type=int, default=10, help="seeds 42, 43, ...")
    ap.add_argument("--spread-seeds", type=int, default=None,
                    help="fewer seeds for spread (its core index path is slow here)")
    ap.add_argument("--demand", type=float, default=1.3)
    ap.add_argument("--out", type=Path, default=None,
                    help="append run results (JSON lines); runs it holds are skipped")
    ap.add_argument("--plot-dir", type=Path, default=None)
    ap.add_argument("--from-results", type=Path, default=None,
                    help="only report (and plot) from a results file of earlier runs")
    args = ap.parse_args()
    lists = args.lists.split(",")
    policies = args.policies.split(",")
    for p in policies:
        if p not in POLICIES:
            sys.exit(f"--policies: unknown policy {p!r} (known: {', '.join(POLICIES)})")
    print(f"load average {os.getloadavg()}, cpus {os.cpu_count()}", flush=True)
    runs: list[dict] = []
    if args.from_results is not None:
        runs = [json.loads(line) for line in args.from_results.read_text().splitlines() if line]
    else:
        nodes_path = args.trace_dir / "openb_node_list_gpu_node.csv"
        nodes = read_nodes(nodes_path)
        print(f"nodes: {len(nodes)} with {sum(n.gpus for n in nodes)} GPUs ({nodes_path})")
        pod_lists = {name: read_pods(args.trace_dir / f"openb_pod_list_{name}.csv")
                     for name in lists}
        done = _done(args.out) if args.out is not None else set()
        # Seed by seed, every list and policy each time: a run cut short still compares
        # them all; runs already in --out are not repeated (a stopped matrix resumes).
        for seed in range(42, 42 + args.seeds):
            for name, pods in pod_lists.items():
                for policy in policies:
                    if (policy == "spread" and args.spread_seeds is not None
                            and seed >= 42 + args.spread_seeds):
                        continue
                    if (name, policy, seed) in done:
                        continue
                    r = run_fill(nodes, pods, policy, seed, args.demand)
                    a = r.allocation(1, round(args.demand * 100))
                    run = {"list": name, "policy": policy, "seed": seed, "gpus": r.gpus,
                           "pods": len(r.steps), "seconds": round(r.seconds, 3),
                           "allocation": a, "fragmentation": r.fragmentation(),
                           "load": round(os.getloadavg()[0], 1),
                           "left": {k: v.as_dict() for k, v in r.left.items()},
                           "failed": _top_failed(r.failed)}
                    runs.append(run)
                    print(f"  {name:<12} {policy:<14} seed {seed}  alloc@100 {a['100']:6.2f}  "
                          f"alloc@130 {a['130']:6.2f}  {len(r.steps) / r.seconds:7.0f} pods/s  "
                          f"load {os.getloadavg()[0]:.1f}", flush=True)
                    if args.out is not None:
                        with args.out.open("a") as fh:
                            fh.write(json.dumps(run) + "\n")
    report(runs, args.demand)
    leftover_report(runs)
    if args.plot_dir is not None:
        plot(runs, args.plot_dir, args.demand)
    print(f"load average {os.getloadavg()}", flush=True)


def _top_failed(failed: dict, top: int = 12) -> list[list]:
    """The pod shapes that found no room, most milli-GPUs first:
    ``[GPUs, milli-GPU each, cores, GPU models, count]``."""
    ranked = sorted(failed.items(), key=lambda kv: (-kv[0][0] * kv[0][1] * kv[1], kv[0]))
    return [[g, m, c, "|".join(spec), n] for (g, m, c, spec), n in ranked[:top]]


def leftover_report(runs: list[dict]) -> None:
    """Where the unallocated GPUs are at the end (mean over seeds), per list and policy."""
    print()
    print("| list | policy | node type | nodes | GPUs free (% of its GPUs) | on partly used GPUs "
          "| on nodes < 1 core free |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in dict.fromkeys(r["list"] for r in runs):
        for policy in dict.fromkeys(r["policy"] for r in runs):
            rs = [r for r in runs if r["list"] == name and r["policy"] == policy and "left" in r]
            if not rs:
                continue
            kinds = sorted(rs[0]["left"], key=lambda k: -rs[0]["left"][k]["free"])[:6]
            for kind in kinds:
                cells = [r["left"][kind] for r in rs if kind in r["left"]]
                free = statistics.mean(c["free"] for c in cells) / 1000
                cap = cells[0]["capacity"] / 1000
                part = statistics.mean(c["partial"] for c in cells) / 1000
                strand = statistics.mean(c["stranded"] for c in cells) / 1000
                print(f"| {name} | {policy} | {kind} | {cells[0]['nodes']} | {free:.1f} "
                      f"({100 * free / cap:.1f} %) | {part:.1f} | {strand:.1f} |")


def _done(path: Path) -> set[tuple[str, str, int]]:
    """(list, policy, seed) of the runs a results file already holds."""
    if not path.exists():
        return set()
    runs = [json.loads(line) for line in path.read_text().splitlines() if line]
    return {(r["list"], r["policy"], r["seed"]) for r in runs}


def _stats(values: list[float]) -> str:
    if not values:
        return "-"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):6.2f} ± {sd:4.2f} [{min(values):6.2f}, {max(values):6.2f}]"


def report(runs: list[dict], demand: float) -> None:
    top = str(round(demand * 100))
    lists = list(dict.fromkeys(r["list"] for r in runs))
    policies = list(dict.fromkeys(r["policy"] for r in runs))
    print()
    print(f"| list | policy | seeds | alloc @100 % (mean ± sd [min, max]) | "
          f"alloc @{top} % | frag @90 % | pods/s (median) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in lists:
        for policy in policies:
            rs = [r for r in runs if r["list"] == name and r["policy"] == policy]
            if not rs:
                continue
            speed = statistics.median(r["pods"] / r["seconds"] for r in rs if r["seconds"])
            frag = statistics.mean(r["fragmentation"]["90"] for r in rs)
            at100 = _stats([r["allocation"]["100"] for r in rs])
            at_top = _stats([r["allocation"][top] for r in rs])
            print(f"| {name} | {policy} | {len(rs)} | {at100} | {at_top} | {frag:5.2f} "
                  f"| {speed:,.0f} |")
    print()
    print("published means, default list, 130 %: " + ", ".join(
        f"{k} {v}" for k, v in PUBLISHED_130.items()) + "; 100 %: " + ", ".join(
        f"{k} {v}" for k, v in PUBLISHED_100.items()))


def plot(runs: list[dict], folder: Path, demand: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    top = round(demand * 100)
    for name in dict.fromkeys(r["list"] for r in runs):
        series = {}
        for policy in dict.fromkeys(r["policy"] for r in runs):
            rs = [r for r in runs if r["list"] == name and r["policy"] == policy]
            if not rs:
                continue
            marks = range(50, top + 1)
            series[f"{policy} ({len(rs)} seeds)"] = [
                (float(m), statistics.mean(r["allocation"][str(m)] for r in rs)) for m in marks]
        path = folder / f"trace-fill-{name}.png"
        line_plot(path, series, title=f"openb {name}: GPU allocation, mean over seeds",
                  xlabel="arrived GPU demand (% of capacity)", ylabel="GPU allocated (%)",
                  diagonal=True, ylim=(50, 100), inset=(85, 100))
        print(f"plot: {path}")


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"bench took {time.perf_counter() - t0:.0f} s")
