"""A test "CUDA program" for the FAKE MPS control: connects as an MPS client, then holds.

    python cuda_client.py [--cheat]

`--cheat` first drops the client-side limits (as a program that unsets or raises
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and the pinned memory limit would). Prints the connection
as a JSON line. On SIGTERM it says whether the server had terminated it first (what the
agent must do before any signal), then exits 143.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
pipe = Path(os.environ["CUDA_MPS_PIPE_DIRECTORY"])
marker = pipe / f"fake-terminated-{os.getpid()}"


def on_term(signum: int, frame: object) -> None:
    print(json.dumps({"signal": signum, "terminated_first": marker.exists()}), flush=True)
    sys.exit(143)


signal.signal(signal.SIGTERM, on_term)
env = dict(os.environ)
if "--cheat" in sys.argv:
    env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = "100"
    env.pop("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", None)
out = subprocess.run([sys.executable, str(HERE / "fake_mps_control.py"), "--fake-connect",
                      str(os.getpid())], env=env, capture_output=True, text=True, check=True)
print(out.stdout.strip(), flush=True)
if "error" in json.loads(out.stdout):
    sys.exit(2)  # as cudaErrorMpsServerNotReady ends a real program
said = False
while True:
    if marker.exists() and not said:
        print(json.dumps({"event": "cudaErrorMpsClientTerminated"}), flush=True)
        said = True
    time.sleep(0.05)
