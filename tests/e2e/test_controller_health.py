"""The probes the deploy/ manifests point at: ``gpushare controllers --health-port`` serves
/healthz, /livez and /readyz; both replicas of a leader-elected pair turn ready (the
leader once its caches synced, the standby once it follows the Lease), and a replica that
cannot reach its Lease stays unready."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from e2e_support import free_port, wait_for

from gpushare.kube.health import Health, serve_health
from gpushare.kube.leader import LeaderElectionConfig, LeaderElector


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError as error:
        return 0, str(error)


def replica(kubeconfig: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpushare.cli.main", "controllers", "--kubeconfig",
         str(kubeconfig), "--leader-elect", "--leader-elect-resource-namespace", "gpushare",
         "--leader-elect-lease-duration", "3", "--leader-elect-retry-period", "0.3",
         "--only", "pod-grouper", "--only", "scheduler", "--metrics-interval", "0",
         "--health-port", str(port)],
        stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )


def test_health_checks_answer_500_naming_the_failing_one():
    failing = {"why": "the caches have not synced yet"}
    health = Health(ready={"informers-synced": lambda: failing["why"]})
    server = serve_health(health, free_port(), "127.0.0.1")
    port = server.server_address[1]
    try:
        assert _get(port, "/healthz") == (200, "ok")
        assert _get(port, "/livez") == (200, "ok")
        code, text = _get(port, "/readyz")
        assert code == 500
        assert "[-]informers-synced failed: the caches have not synced yet" in text
        assert "[+]ping ok" in text
        failing["why"] = None
        code, text = _get(port, "/readyz?verbose")
        assert code == 200 and "[+]informers-synced ok" in text
        assert _get(port, "/nothing")[0] == 404
    finally:
        server.shutdown()


def test_a_replica_that_never_read_its_lease_is_not_ready():
    elector = LeaderElector(None, LeaderElectionConfig(namespace="gpushare"))  # type: ignore[arg-type]
    assert elector.watch_problem() == "the Lease gpushare/gpushare-controllers has not been " \
                                      "read yet"
    assert elector.renew_problem() is None  # not leading: nothing to renew


def test_leader_and_standby_both_turn_ready(server, kubectl, tmp_path):
    kubectl.run("create", "namespace", "gpushare")
    ports = [free_port(), free_port()]
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    first = replica(server.kubeconfig, ports[0], logs[0])
    wait_for(lambda: "controllers running" in logs[0].read_text(), timeout=60,
             what="the first replica leading")
    second = replica(server.kubeconfig, ports[1], logs[1])
    try:
        for port in ports:
            wait_for(lambda port=port: _get(port, "/readyz")[0] == 200, timeout=60,
                     what=f"/readyz on {port}")
            assert _get(port, "/livez") == (200, "ok")
        code, leader = _get(ports[0], "/readyz?verbose")
        assert code == 200
        assert "[+]informers-synced ok" in leader and "[+]leader-election ok" in leader
        assert "controllers running" not in logs[1].read_text()  # the standby only waits
        lease = kubectl.json("get", "lease", "-n", "gpushare", "gpushare-controllers")
        assert lease["spec"]["holderIdentity"]
    finally:
        for process in (first, second):
            process.terminate()
            process.wait(20)


def test_a_replica_without_its_api_server_is_alive_but_not_ready(tmp_path, server):
    kubeconfig = tmp_path / "gone.kubeconfig"
    text = server.kubeconfig.read_text()
    host_port = f"127.0.0.1:{free_port()}"  # nothing listens there
    kubeconfig.write_text(re.sub(r"server: https://[^\s]+", f"server: https://{host_port}",
                                 text))
    port = free_port()
    process = replica(kubeconfig, port, tmp_path / "c.log")
    try:
        wait_for(lambda: _get(port, "/livez")[0] == 200, timeout=60, what="/livez")
        code, text = _get(port, "/readyz")
        assert code == 500
        assert "[-]leader-election failed: the Lease gpushare/gpushare-controllers has not " \
               "been read yet" in text
    finally:
        process.terminate()
        process.wait(20)
