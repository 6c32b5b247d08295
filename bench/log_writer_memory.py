"""Memory of a container log writer, per container, for the ways it could be run.

    PYTHONPATH=src python bench/log_writer_memory.py --writers 20

Each way starts `--writers` writers reading a pipe, feeds each a little output, then reads
their RSS, PSS (shared pages split among the processes sharing them: what a node really
pays per writer) and USS (pages of the writer alone) from ``/proc/<pid>/smaps_rollup``:

* ``logshim`` — what the agent runs today (``python -m gpushare.agent.runtime.logshim``);
* ``bare interpreter`` — ``python -I -S`` with nothing imported but ``os``, ``errno``,
  ``sys`` and ``time``: the floor of any interpreter-per-container writer;
* ``forked from one server`` — writers forked from one ``python -I -S`` process (a fork
  server: the interpreter's pages are shared copy-on-write by all of them).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BARE = "import os, errno, sys, time\nwhile os.read(0, 65536): pass\n"

FORK_SERVER = """
import os, sys, time
n, out = int(sys.argv[1]), sys.argv[2]
kids, writers = [], []
for i in range(n):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        os.setsid()
        fd = os.open(f"{out}/f{i}.log", os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o640)
        while True:
            data = os.read(r, 65536)
            if not data:
                os._exit(0)
            os.write(fd, data)
    os.close(r)
    kids.append(pid)
    writers.append(w)
for w in writers:
    os.write(w, b"hello\\n" * 1000)
print(" ".join(map(str, kids)), flush=True)
sys.stdin.read()
for w in writers:
    os.close(w)
for p in kids:
    os.waitpid(p, 0)
"""


def memory_kib(pid: int) -> tuple[int, int, int]:
    """(RSS, PSS, USS) of `pid` in KiB."""
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            key, _, value = line.partition(":")
            if value.strip().endswith("kB"):
                fields[key] = int(value.split()[0])
    return (fields["Rss"], fields["Pss"],
            fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0))


def _mean(rows: list[tuple[int, int, int]]) -> tuple[float, float, float]:
    return tuple(sum(r[i] for r in rows) / len(rows) / 1024 for i in range(3))  # type: ignore


def separate(argv: list[str], n: int) -> tuple[float, float, float]:
    procs = [subprocess.Popen(argv, stdin=subprocess.PIPE) for _ in range(n)]
    try:
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(b"hello\n" * 1000)
            p.stdin.flush()
        time.sleep(1.5)
        return _mean([memory_kib(p.pid) for p in procs])
    finally:
        for p in procs:
            assert p.stdin is not None
            p.stdin.close()
            p.wait()


def forked(n: int, out: Path) -> tuple[float, float, float]:
    server = subprocess.Popen([sys.executable, "-I", "-S", "-c", FORK_SERVER, str(n), str(out)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert server.stdin is not None and server.stdout is not None
    try:
        kids = [int(p) for p in server.stdout.readline().split()]
        time.sleep(1.0)
        return _mean([memory_kib(p) for p in kids])
    finally:
        server.stdin.close()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, default=20)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; {args.writers} writers per way; "
          "MiB per writer")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        rows = {
            "logshim": separate([sys.executable, "-m", "gpushare.agent.runtime.logshim",
                                 str(out / "0.log")], args.writers),
            "bare interpreter": separate([sys.executable, "-I", "-S", "-c", BARE],
                                         args.writers),
            "forked from one server": forked(args.writers, out),
        }
    print(f"{'way':26s} {'RSS':>7s} {'PSS':>7s} {'USS':>7s}")
    for name, (rss, pss, uss) in rows.items():
        print(f"{name:26s} {rss:7.2f} {pss:7.2f} {uss:7.2f}")


if __name__ == "__main__":
    main()
