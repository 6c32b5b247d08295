"""A "pod" for the GPU share experiment: a bf16 matmul loop that reports its own TFLOP/s.

    python3 matmul_worker.py --seconds 20 --hold-gib 2 [--alloc-gib 60] [--start-at EPOCH]

Prints one JSON line at the end (`{"tflops": ..., ...}`); exits 3 when an allocation fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--hold-gib", type=float, default=0.0, help="memory to hold while running")
    parser.add_argument("--alloc-gib", type=float, default=0.0, help="try to allocate this much")
    parser.add_argument("--hold-seconds", type=float, default=0.0, help="sleep holding alloc")
    parser.add_argument("--start-at", type=float, default=0.0, help="epoch to start the loop at")
    parser.add_argument("--undo-fraction", action="store_true",
                        help="raise PyTorch's memory fraction back to 1 (ignore the hook)")
    args = parser.parse_args()

    import torch

    env = {k: v for k, v in os.environ.items() if k.startswith(("CUDA_", "GPU_", "NVIDIA_"))}
    device = torch.device("cuda", 0)
    torch.cuda.init()
    if args.undo_fraction:
        torch.cuda.set_per_process_memory_fraction(1.0, device)
    free, total = torch.cuda.mem_get_info(device)
    info: dict[str, object] = {"pid": os.getpid(), "env": env, "free_mib": free >> 20,
                               "total_mib": total >> 20,
                               "torch_hook": "gpushare" in os.environ.get("PYTHONPATH", "")}
    held = []
    if args.hold_gib:
        held.append(torch.empty(int(args.hold_gib * (1 << 30)), dtype=torch.uint8, device=device))
    if args.alloc_gib:
        try:
            big = torch.empty(int(args.alloc_gib * (1 << 30)), dtype=torch.uint8, device=device)
            big.fill_(1)
            torch.cuda.synchronize()
            info["alloc"] = f"allocated {args.alloc_gib} GiB"
            print(json.dumps(info), flush=True)
            time.sleep(args.hold_seconds)
            held.append(big)
        except RuntimeError as exc:  # torch.OutOfMemoryError is a RuntimeError
            info["alloc"] = f"failed: {str(exc).splitlines()[0][:300]}"
            print(json.dumps(info), flush=True)
            return 3
    n = args.size
    a = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    b = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    for _ in range(3):
        c = a @ b
    torch.cuda.synchronize()
    if args.start_at:
        time.sleep(max(0.0, args.start_at - time.time()))
    iters = 0
    begin = time.perf_counter()
    while time.perf_counter() - begin < args.seconds:
        for _ in range(10):
            c = a @ b
        torch.cuda.synchronize()
        iters += 10
    elapsed = time.perf_counter() - begin
    info.update(
        {
            "tflops": round(2 * n**3 * iters / elapsed / 1e12, 1),
            "iters": iters,
            "seconds": round(elapsed, 2),
            "checksum_finite": bool(torch.isfinite(c.float().sum()).item()),
        }
    )
    print(json.dumps(info), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
