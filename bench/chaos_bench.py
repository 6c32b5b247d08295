"""The long fault run: N seeded trials of `tests/chaos/chaos_run.py`, each S seconds of a
workload of creates, deletes, gang Jobs and evictions while the API server, the controllers
and the node agent are killed with SIGKILL at random moments and started again.

It prints one line per trial (acknowledged writes, kills, evictions, samples, the end
state, violations), the totals and the machine's load, and exits 1 if any trial found a
violation (each is printed).

    python bench/chaos_bench.py --trials 5 --seconds 60
    python bench/chaos_bench.py --trials 1 --seconds 30 --seed 7 --keep /tmp/chaos
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "chaos"))

from chaos_run import ChaosRun, Result, write_json


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="length of the faulty workload of each trial")
    parser.add_argument("--seed", type=int, default=1, help="seed of the first trial")
    parser.add_argument("--kill-every", type=float, nargs=2, default=(1.5, 4.0),
                        metavar=("MIN", "MAX"), help="seconds between two kills")
    parser.add_argument("--keep", type=Path, help="keep the trials' logs and data here")
    parser.add_argument("--json", type=Path, help="write the per-trial figures here")
    args = parser.parse_args()
    if args.trials < 1 or args.seconds <= 0:
        parser.error("--trials must be >= 1 and --seconds > 0")
    root = args.keep or Path(tempfile.mkdtemp(prefix="gpushare-chaos-"))
    results: list[Result] = []
    started = time.monotonic()
    try:
        for i in range(args.trials):
            seed = args.seed + i
            run = ChaosRun(root / f"trial-{seed}", seed, args.seconds,
                           kill_every=tuple(args.kill_every))
            result = run.run()
            results.append(result)
            print(result.summary(), f"(load {os.getloadavg()[0]:.1f})", flush=True)
            for violation in result.violations:
                print("   violation:", violation, flush=True)
            for refusal in result.ledger_refusals:
                print("   refused by the agent's ledger:", refusal, flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    kills: Counter[str] = Counter()
    for r in results:
        kills.update(r.kills)
    violations = sum(len(r.violations) for r in results)
    print(f"total: {len(results)} trials x {args.seconds:.0f}s, "
          f"{sum(r.writes for r in results)} acknowledged writes, "
          f"{sum(kills.values())} kills ({', '.join(f'{k} {v}' for k, v in sorted(kills.items()))})"
          f", {sum(r.evictions for r in results)} evictions, "
          f"{sum(r.samples for r in results)} process samples, "
          f"{sum(len(r.ledger_refusals) for r in results)} pods refused by the agent's ledger, "
          f"{violations} violations; "
          f"{time.monotonic() - started:.0f}s wall, load {os.getloadavg()} "
          f"on {os.cpu_count()} CPUs")
    if args.json:
        write_json(args.json, results)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
