"""Attack: a pod names a path the sandbox hides (/root, /home, /tmp, /run) in its argv or
its PATH/PYTHONPATH, and the agent binds it back into the sandbox. Only paths the agent
chose are bound; a pod reading a hidden path by naming it gets nothing."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from tenancy_support import Platform

from waiting import wait_for

QUEUE = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: binds}
spec:
  resources:
    gpu: {quota: 1, limit: -1, overQuotaWeight: 1}
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    memory: {quota: -1, limit: -1, overQuotaWeight: 1}
"""


def _pod(name: str, command: list[str], env: dict[str, str]) -> str:
    return json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default",
                     "labels": {"kai.scheduler/queue": "binds"}},
        "spec": {"schedulerName": "gpushare", "restartPolicy": "Never",
                 "containers": [{"name": "c", "image": "python", "command": command,
                                 "env": [{"name": k, "value": v} for k, v in env.items()]}]}})


def test_a_pod_cannot_have_hidden_host_paths_bound_by_naming_them(
        platform: Platform) -> None:
    secret_dir = Path("/root") / f"security-binds-{uuid.uuid4().hex}"
    secret_dir.mkdir(mode=0o755)
    tmp_secret = Path("/tmp") / f"security-binds-{uuid.uuid4().hex}"
    tmp_secret.mkdir(mode=0o755)
    try:
        for directory in (secret_dir, tmp_secret):
            (directory / "secret.txt").write_text("the host's secret\n")
            (directory / "secret.txt").chmod(0o644)
        platform.host.apply(QUEUE)
        reader = ("import os,sys\n"
                  "for p in sys.argv[1:]:\n"
                  "    try: print(p, open(p).read().strip())\n"
                  "    except OSError as e: print(p, 'unreadable', type(e).__name__)\n"
                  "print('listing', os.path.isdir(os.environ['PYTHONPATH']))\n")
        platform.host.apply(_pod("binds", [
            "python3", "-c", reader, str(secret_dir / "secret.txt"),
            str(tmp_secret / "secret.txt")],
            {"PYTHONPATH": str(secret_dir),
             "PATH": f"{tmp_secret}:/usr/local/bin:/usr/bin:/bin"}))
        wait_for(lambda: platform.host.run("get", "pod", "binds", "-o",
                                           "jsonpath={.status.phase}").stdout
                 in ("Succeeded", "Failed"), 90, "the pod to finish")
        logs = platform.host.run("logs", "binds").stdout
        assert "listing" in logs, logs
        assert "the host's secret" not in logs, f"a hidden host path was bound: {logs}"
        assert "listing False" in logs, logs
    finally:
        for directory in (secret_dir, tmp_secret):
            (directory / "secret.txt").unlink(missing_ok=True)
            directory.rmdir()
