"""A team's GPU work in the demo: a bf16 matmul loop that prints its rate.

    python3 matmul.py TEAM [--size 8192] [--every 2] [--alloc-mib N --hold 120]

The first line names the team, the GPU (``CUDA_VISIBLE_DEVICES``) and the portion
(``GPU_PORTION``) the node agent gave the pod; then every ``--every`` seconds one line
``rate <x> TFLOP/s``. With ``--alloc-mib`` the pod instead asks for that much GPU memory
(past the framework's memory fraction, so only the node's enforcement can stop it), prints
``allocated <n> MiB`` and holds it, or prints ``allocation of <n> MiB failed: ...`` and exits 3.
Needs torch with CUDA.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("team")
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--every", type=float, default=2.0, help="seconds between rate lines")
    parser.add_argument("--alloc-mib", type=int, default=0, help="allocate this much and hold it")
    parser.add_argument("--hold", type=float, default=120.0, help="seconds to hold --alloc-mib")
    args = parser.parse_args()
    print(f"{args.team} step on GPU {os.environ.get('CUDA_VISIBLE_DEVICES')} portion "
          f"{os.environ.get('GPU_PORTION')}", flush=True)

    import torch

    device = torch.device("cuda", 0)
    torch.cuda.init()
    if args.alloc_mib:
        torch.cuda.set_per_process_memory_fraction(1.0, device)  # the hook is cooperative
        try:
            block = torch.empty(args.alloc_mib << 20, dtype=torch.uint8, device=device)
            block.fill_(1)
            torch.cuda.synchronize()
        except RuntimeError as exc:  # torch.OutOfMemoryError is a RuntimeError
            print(f"allocation of {args.alloc_mib} MiB failed: {str(exc).splitlines()[0][:300]}",
                  flush=True)
            return 3
        print(f"allocated {args.alloc_mib} MiB", flush=True)
        time.sleep(args.hold)
        return 0
    n = args.size
    a = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    b = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    torch.cuda.synchronize()
    while True:
        iters, begin = 0, time.perf_counter()
        while time.perf_counter() - begin < args.every:
            for _ in range(5):
                a @ b
            torch.cuda.synchronize()
            iters += 5
        elapsed = time.perf_counter() - begin
        print(f"rate {2 * n**3 * iters / elapsed / 1e12:.1f} TFLOP/s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
