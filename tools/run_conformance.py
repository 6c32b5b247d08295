"""Run Kubernetes conformance tests one by one against a cluster and print the figures.

Each test of the list (docs/conformance-tests.txt: one name per line, ``#`` comments) runs
in its own ``e2e.test`` process (a binary built from a Kubernetes release tree, which this
project does not ship), a few at a time, each with a time limit; every log is kept.

    python tools/run_conformance.py --e2e /path/to/e2e.test \\
        --kubeconfig .gpushare/admin.kubeconfig --out /tmp/conformance
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import re
import subprocess
import time
from pathlib import Path

SUITE_FLAGS = (
    "--provider=skeleton", "--ginkgo.noColor", "--ginkgo.v",
    "--kubectl-path=/usr/bin/kubectl",
    # The 1.22/1.23 suite waits for legacy ServiceAccount token Secrets and system pods,
    # which clusters since 1.24 need not have.
    "--e2e-verify-service-account=false", "--minStartupPods=-1",
    "--system-pods-startup-timeout=30s", "--node-schedulable-timeout=30s",
    "--allowed-not-ready-nodes=0", "--dump-logs-on-failure=false", "--disable-log-dump",
)
_SUMMARY = re.compile(r"Ran (\d+) of \d+ Specs.*?\n(SUCCESS|FAIL)", re.S)


def focus(name: str) -> str:
    """The test's name as a ginkgo focus regex matching it alone."""
    return re.sub(r"([\[\]\(\)\{\}\.\*\+\?\^\$\|\\])", r"\\\1", name) + "$"


def run_one(args: argparse.Namespace, index: int, name: str) -> dict[str, object]:
    log = args.out / f"{index:03d}.log"
    started = time.monotonic()
    with log.open("w") as out, contextlib.suppress(subprocess.TimeoutExpired):
        subprocess.run([str(args.e2e), f"--kubeconfig={args.kubeconfig}",
                        f"--ginkgo.focus={focus(name)}", *SUITE_FLAGS,
                        f"--kube-api-content-type={args.content_type}",
                        f"--report-dir={args.out / 'junit'}"],
                       stdout=out, stderr=subprocess.STDOUT, timeout=args.timeout)
    text = log.read_text(errors="replace")
    found = _SUMMARY.search(text)
    ran = int(found.group(1)) if found else 0
    passed = bool(found) and found.group(2) == "SUCCESS" and ran == 1
    return {"test": name, "passed": passed, "ran": ran, "log": log.name,
            "seconds": round(time.monotonic() - started)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--e2e", type=Path, required=True, help="the e2e.test binary")
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--tests", type=Path, default=Path("docs/conformance-tests.txt"))
    parser.add_argument("--out", type=Path, required=True, help="logs and results.json")
    parser.add_argument("--parallel", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=200.0, help="seconds per test")
    parser.add_argument("--content-type", default="application/json",
                        help="the suite's request bodies (its default is protobuf)")
    args = parser.parse_args()
    names = [line.rstrip("\n") for line in args.tests.read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    args.out.mkdir(parents=True, exist_ok=True)
    with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
        results = list(pool.map(lambda pair: run_one(args, *pair), enumerate(names)))
    for row in results:
        print(f"{'PASS' if row['passed'] else 'FAIL'} {row['seconds']:>4}s {row['test']}")
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    passed = sum(1 for r in results if r["passed"])
    print(f"{passed} passed, {len(results) - passed} failed")


if __name__ == "__main__":
    main()
