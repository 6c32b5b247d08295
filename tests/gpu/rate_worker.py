"""A "pod" for the MPS survival experiment: a bf16 matmul loop that prints its rate often.

    python3 rate_worker.py [--size 4096] [--every 0.25] [--cheat] [--escape]
                           [--alloc-gib G] [--fault-after S] [--seconds S]

One JSON line at start (`ready`, what CUDA sees), then `{"t": epoch, "rate": TFLOP/s}` every
`--every` seconds until `--seconds` (default: until stopped). Any CUDA error is printed as
`{"t": ..., "error": "..."}` and ends the program with exit code 1.

`--cheat` raises CUDA_MPS_ACTIVE_THREAD_PERCENTAGE to 100 and drops the pinned memory limit
before CUDA starts (only the MPS server's own limits then hold); `--escape` drops
CUDA_MPS_PIPE_DIRECTORY too (the program runs outside MPS, where only the watchdogs see it).
`--fault-after S` makes the program write through a bad device pointer after S seconds
(cudaErrorIllegalAddress, a fatal fault for its MPS server).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def say(**fields: object) -> None:
    print(json.dumps({"t": round(time.time(), 3), **fields}), flush=True)


def bad_write() -> None:
    import cupy

    kernel = cupy.RawKernel(
        r'extern "C" __global__ void bad(unsigned long long a) { *((int*)a) = 1; }', "bad")
    kernel((1,), (1,), (cupy.uint64(8),))
    cupy.cuda.runtime.deviceSynchronize()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--every", type=float, default=0.25)
    parser.add_argument("--seconds", type=float, default=0.0)
    parser.add_argument("--cheat", action="store_true")
    parser.add_argument("--escape", action="store_true")
    parser.add_argument("--alloc-gib", type=float, default=0.0)
    parser.add_argument("--fault-after", type=float, default=0.0)
    args = parser.parse_args()
    if args.cheat or args.escape:
        os.environ["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = "100"
        os.environ.pop("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", None)
    if args.escape:
        os.environ.pop("CUDA_MPS_PIPE_DIRECTORY", None)
    import torch

    try:
        torch.cuda.init()
        torch.cuda.set_per_process_memory_fraction(1.0, 0)  # no cooperative cap: MPS's only
        free, total = torch.cuda.mem_get_info(0)
        env = {k: v for k, v in os.environ.items() if k.startswith(("CUDA_MPS", "CUDA_VIS"))}
        say(ready=os.getpid(), free_mib=free >> 20, total_mib=total >> 20, env=env)
        if args.alloc_gib:
            try:
                big = torch.empty(int(args.alloc_gib * (1 << 30)), dtype=torch.uint8, device=0)
                big.fill_(1)
                torch.cuda.synchronize()
                say(alloc=f"allocated {args.alloc_gib} GiB")
                del big
            except RuntimeError as exc:
                say(alloc=f"failed: {str(exc).splitlines()[0][:200]}")
        n = args.size
        a = torch.randn(n, n, dtype=torch.bfloat16, device=0)
        b = torch.randn(n, n, dtype=torch.bfloat16, device=0)
        torch.matmul(a, b)
        torch.cuda.synchronize()
        begin = window = time.perf_counter()
        count = 0
        while not args.seconds or time.perf_counter() - begin < args.seconds:
            for _ in range(4):
                torch.matmul(a, b)
            torch.cuda.synchronize()
            count += 4
            now = time.perf_counter()
            if now - window >= args.every:
                say(rate=round(2 * n**3 * count / (now - window) / 1e12, 1))
                window, count = now, 0
            if args.fault_after and now - begin >= args.fault_after:
                say(fault="writing through a bad device pointer")
                bad_write()
        return 0
    except Exception as exc:  # a CUDA error: say which, end with an error
        say(error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
