"""Run the embedded API server as its own process (tests kill it with SIGKILL).

    python tests/e2e/serve.py DATA_DIR PORT KUBECONFIG
"""

from __future__ import annotations

import signal
import sys
import threading

from gpushare.cli.compose import api_server


def main() -> None:
    data_dir, port, kubeconfig = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    server = api_server(data_dir, "127.0.0.1", port)
    server.start()
    server.write_kubeconfig(kubeconfig)
    print("ready", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    server.stop()


if __name__ == "__main__":
    main()
