"""A FAKE `nvidia-cuda-mps-control` for tests on machines without a GPU (named as such).

The real control daemon cannot exist here. This one keeps its "daemon" as a JSON state file
in `CUDA_MPS_PIPE_DIRECTORY` and answers the same commands on stdin as the real one:

* `-d` starts the "daemon" (creates `control` and the state); `quit` ends it.
* `get_server_list`, `get_client_list <server>`, `get_server_status <server>`
  (ACTIVE or FAULT), `terminate_client <server> <client>`, `shutdown_server <server> [-f]`,
  `set_default_active_thread_percentage <n>`, `get_default_active_thread_percentage`,
  `set_active_thread_percentage <server> <n>`, `set_default_device_pinned_mem_limit <dev>
  <value>`, `set_device_pinned_mem_limit <server> <dev> <value>`.

Every command is recorded, with a sequence number, in `fake-mps-calls.log` in the pipe
directory. Test clients (`cuda_client.py`) "connect" with `--fake-connect <pid>`: the server
is spawned for the first one (as the real daemon does), a client's limits are the server's
lowered by its own environment, and a server in FAULT refuses new clients until all of its
clients have exited (then it is gone, as the real one recovers). `--fake-fault <client pid>`
puts the client's server in FAULT and writes a line naming the client in `server.log` of
`CUDA_MPS_LOG_DIRECTORY`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

STATE = "fake-mps-state.json"
LOCK = "fake-mps.lock"
CALLS = "fake-mps-calls.log"
FIRST_SERVER_PID = 4_000_000


def pipe_dir() -> Path:
    return Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"))


def log_dir() -> Path:
    return Path(os.environ.get("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps"))


@contextlib.contextmanager
def locked(pipe: Path) -> Iterator[dict[str, Any]]:
    with open(pipe / LOCK, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = json.loads((pipe / STATE).read_text())
        yield state
        tmp = pipe / (STATE + ".tmp")
        tmp.write_text(json.dumps(state))
        os.chmod(tmp, 0o666)
        tmp.replace(pipe / STATE)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie has exited
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _prune(state: dict[str, Any]) -> None:
    """Clients that exited leave their server; a FAULT server with none left is gone."""
    for spid in list(state["servers"]):
        server = state["servers"][spid]
        server["clients"] = [c for c in server["clients"] if _alive(c["pid"])]
        if server["status"] == "FAULT" and not server["clients"]:
            del state["servers"][spid]


def _record(pipe: Path, command: str) -> None:
    with open(pipe / LOCK, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        calls = pipe / CALLS
        seq = sum(1 for _ in calls.open()) if calls.exists() else 0
        with calls.open("a") as f:
            f.write(f"{seq}\t{time.time_ns()}\t{command}\n")


def start_daemon(pipe: Path) -> int:
    pipe.mkdir(parents=True, exist_ok=True)
    if (pipe / "control").exists():
        print("An instance of this daemon is already running")
        return 1
    (pipe / STATE).write_text(json.dumps({"servers": {}, "next": FIRST_SERVER_PID,
                                          "default_pct": 100, "default_mem": {}}))
    for name in (STATE, LOCK):
        (pipe / name).touch()
        os.chmod(pipe / name, 0o666)
    (pipe / "control").touch()
    log_dir().mkdir(parents=True, exist_ok=True)
    _record(pipe, "-d")
    return 0


def _mib(value: str) -> int:
    units = {"M": 1, "G": 1024, "T": 1024 * 1024}
    return int(float(value[:-1]) * units[value[-1].upper()]) if value[-1].isalpha() else (
        int(value) // (1024 * 1024))


def command(pipe: Path, line: str) -> tuple[int, str]:
    words = line.split()
    if not words:
        return 0, ""
    _record(pipe, line)
    if not (pipe / "control").exists():
        return 1, "Cannot find MPS control daemon process"
    name, args = words[0], words[1:]
    if name == "quit":
        (pipe / "control").unlink()
        return 0, ""
    with locked(pipe) as state:
        _prune(state)
        servers = state["servers"]
        if name == "get_server_list":
            return 0, "".join(f"{s}\n" for s in servers)
        if name == "set_default_active_thread_percentage":
            state["default_pct"] = int(float(args[0]))
            return 0, f"{state['default_pct']}.0\n"
        if name == "get_default_active_thread_percentage":
            return 0, f"{float(state['default_pct'])}\n"
        if name == "set_default_device_pinned_mem_limit":
            state["default_mem"][args[0]] = args[1]
            return 0, ""
        server = servers.get(args[0]) if args else None
        if server is None:
            return 0, f"Server {args[0] if args else ''} not found\n"
        if name == "get_client_list":
            return 0, "".join(f"{c['pid']}\n" for c in server["clients"])
        if name == "get_server_status":
            return 0, f"{server['status']}\n"
        if name == "set_active_thread_percentage":
            server["pct"] = int(float(args[1]))
            return 0, f"{server['pct']}.0\n"
        if name == "set_device_pinned_mem_limit":
            server["mem"][args[1]] = args[2]
            return 0, ""
        if name == "terminate_client":
            pid = int(args[1])
            if all(c["pid"] != pid for c in server["clients"]):
                return 0, f"Client {pid} not found\n"
            (pipe / f"fake-terminated-{pid}").touch()
            os.chmod(pipe / f"fake-terminated-{pid}", 0o666)
            for c in server["clients"]:
                if c["pid"] == pid:
                    c["terminated"] = True
            return 0, "success\n"
        if name == "shutdown_server":
            del servers[args[0]]
            return 0, ""
    return 0, f"Unrecognized command {name}\n"


def connect(pipe: Path, pid: int, env: dict[str, str], uid: int) -> dict[str, Any]:
    """A client's first CUDA call: the server it gets and its effective limits."""
    with locked(pipe) as state:
        _prune(state)
        server_id = next(iter(state["servers"]), None)
        if server_id is None:
            server_id = str(state["next"])
            state["next"] += 1
            state["servers"][server_id] = {"uid": uid, "status": "ACTIVE", "clients": [],
                                           "pct": state["default_pct"],
                                           "mem": dict(state["default_mem"])}
        server = state["servers"][server_id]
        if server["status"] != "ACTIVE" or server["uid"] != uid:
            return {"error": "cudaErrorMpsServerNotReady", "server": server_id}
        pct = server["pct"]
        asked = env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
        if asked:
            pct = min(pct, int(float(asked)))
        limits = {dev: _mib(v) for dev, v in server["mem"].items()}
        for item in filter(None, env.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "").split(",")):
            dev, _, value = item.partition("=")
            limits[dev] = min(limits.get(dev, 1 << 40), _mib(value))
        server["clients"].append({"pid": pid, "pct": pct, "mem": limits})
        return {"server": server_id, "pct": pct, "mem_mib": limits}


def fault(pipe: Path, pid: int) -> None:
    with locked(pipe) as state:
        for spid, server in state["servers"].items():
            if any(c["pid"] == pid for c in server["clients"]):
                server["status"] = "FAULT"
                with (log_dir() / "server.log").open("a") as f:
                    f.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] Server {spid}: client "
                            f"{pid} encountered a fatal GPU exception (Xid 31)\n")


def main(argv: list[str]) -> int:
    pipe = pipe_dir()
    if argv[:1] == ["-d"]:
        return start_daemon(pipe)
    if argv[:1] == ["--fake-connect"]:
        print(json.dumps(connect(pipe, int(argv[1]), dict(os.environ), os.getuid())))
        return 0
    if argv[:1] == ["--fake-fault"]:
        fault(pipe, int(argv[1]))
        return 0
    code = 0
    for line in sys.stdin:
        code, out = command(pipe, line.strip())
        sys.stdout.write(out)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
