"""What the pod sandbox costs a container start: from `process.start` to the command's
first output line in its log, for each isolation mode (none, setuid, bwrap), for a shell
`echo` and for the system Python. Needs root (the setuid and bwrap modes) and bubblewrap.

    python bench/sandbox_bench.py [--runs 20]

Prints min and median per mode and command, the ratio to `none` in the same run, and the
machine's load average before and after."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gpushare.agent.runtime import process as proc
from gpushare.agent.runtime import sandbox as sb
from gpushare.agent.runtime.logstore import META_DIR

COMMANDS = {
    "sh echo": ("/bin/sh", "-c", "echo ready"),
    "python3 print": ("/usr/bin/python3", "-c", "print('ready')"),
}


def one_start(root: Path, mode: str, argv: tuple[str, ...], n: int, label: str) -> float:
    directory = root / "pods" / "bench" / f"{label.split()[0]}-{mode}-{n}"
    state = None
    if mode != sb.NONE:
        policy = sb.SandboxPolicy(mode, "bench", (str(root / "hidden"),))
        state = sb.new_state(policy, directory, f"p{n}", set())
        sb.prepare(state, root / "pods")
    else:
        directory.mkdir(parents=True)
    log = directory / META_DIR / "logs" / "main.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    process = proc.start(argv, {"PATH": "/usr/bin:/bin"}, directory, log,
                         directory / META_DIR / "exit" / "main.0", state)
    while b"ready" not in log.read_bytes():
        if process.poll() not in (None, 0):
            raise RuntimeError(f"{mode}: {log.read_text()}")
        time.sleep(0.0005)
    elapsed = time.perf_counter() - started
    while process.poll() is None:
        time.sleep(0.001)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root: the setuid and bwrap modes start pods as other users")
    ok, why = sb.bwrap_works()
    modes = [sb.NONE, sb.SETUID] + ([sb.BWRAP] if ok else [])
    if not ok:
        print(f"bwrap left out: {why}")
    print(f"load average before: {os.getloadavg()}")
    root = Path(tempfile.mkdtemp(prefix="gpushare-sandbox-bench-"))
    root.chmod(0o711)
    try:
        for label, argv in COMMANDS.items():
            results: dict[str, list[float]] = {m: [] for m in modes}
            for n in range(args.runs):  # interleaved, so load changes hit every mode alike
                for mode in modes:
                    results[mode].append(one_start(root, mode, argv, n, label))
            base = statistics.median(results[sb.NONE])
            for mode in modes:
                times = results[mode]
                median = statistics.median(times)
                print(f"{label:14s} {mode:7s} runs={len(times)} min={min(times) * 1e3:7.2f} ms "
                      f"median={median * 1e3:7.2f} ms  x{median / base:5.2f} of none")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
