"""`kubectl exec`, `attach`, `cp` and `port-forward` end to end: /usr/bin/kubectl and the
official Python client against the embedded API server, which authorizes the request and
relays it to a real `gpushare agent` process over the agent's HTTPS node endpoint. The
pods are the agent's local processes; the agent's port itself lets in only the API server's
client certificate or a token allowed `nodes/proxy`."""

from __future__ import annotations

import base64
import http.client
import json
import os
import pty
import select
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_support import KUBECTL, free_port, wait_for
from kubernetes import client, config
from kubernetes.stream import stream

from gpushare.cli.compose import api_server
from gpushare.kube.client import NODES, PODS, KubeClient
from node_pki import client_cert

NODE = "stream-node"
NS = "default"


class Streams:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.server = api_server(root / "api").start()
        self.kubeconfig = root / "api" / "admin.kubeconfig"
        self.kube = KubeClient.from_kubeconfig(str(self.kubeconfig))
        self.agent = subprocess.Popen(
            [sys.executable, "-m", "gpushare.cli.main", "agent", "--kubeconfig",
             str(self.kubeconfig), "--node-name", NODE, "--gpus", "1xH100", "--data-dir",
             str(root / "agent"), "--heartbeat", "0.5", "--stop-pods-on-exit"],
            stdout=open(root / "agent.log", "ab"),  # noqa: SIM115
            stderr=subprocess.STDOUT)
        wait_for(lambda: self.node_port() is not None, 30)

    def node_port(self) -> int | None:
        node = self.kube.get(NODES.item(NODE)) or {}
        return ((node.get("status") or {}).get("daemonEndpoints") or {}).get(
            "kubeletEndpoint", {}).get("Port")

    def kubectl(self, *args: str, stdin: str | bytes | None = None, timeout: float = 60,
                kubeconfig: Path | None = None) -> subprocess.CompletedProcess[bytes]:
        data = stdin.encode() if isinstance(stdin, str) else stdin
        return subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig or self.kubeconfig),
                               *args], input=data, capture_output=True, timeout=timeout,
                              check=False)

    def run_pod(self, name: str, command: list[str],
                host_network: bool = False) -> dict[str, Any]:
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
                "spec": {"nodeName": NODE, "restartPolicy": "Never",
                         "hostNetwork": host_network,
                         "terminationGracePeriodSeconds": 2,
                         "containers": [{"name": "main", "image": "busybox",
                                         "command": command, "workingDir": "/work",
                                         "env": [{"name": "GREETING", "value": "hello"}]}]}}
        self.kube.create(PODS.collection(NS), body)
        return wait_for(lambda: (p := self.kube.get(PODS.item(name, NS))) is not None
                        and (p.get("status") or {}).get("phase") == "Running" and p, 30)

    def user_kubeconfig(self, user: str) -> Path:
        token = base64.b32encode(os.urandom(20)).decode().lower()
        self.server.tokens.add(token, user, [])
        return self.server.write_kubeconfig(self.root / f"{user}.kubeconfig", token=token,
                                            user=user)

    def stop(self) -> None:
        self.agent.send_signal(signal.SIGTERM)
        try:
            self.agent.wait(30)
        except subprocess.TimeoutExpired:
            self.agent.kill()
        self.kube.close()
        self.server.stop()


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Streams]:
    assert Path(KUBECTL).exists(), f"kubectl not found ({KUBECTL}): `make test` installs it"
    cluster = Streams(tmp_path_factory.mktemp("streams"))
    try:
        cluster.run_pod("shell", ["sh", "-c", "echo started; while true; do echo tick; "
                                              "sleep 0.3; done"])
        yield cluster
    finally:
        cluster.stop()


def test_exec_prints_stdout_and_stderr_in_the_pods_environment(streams: Streams) -> None:
    done = streams.kubectl("exec", "shell", "--", "sh", "-c",
                           'echo "$GREETING from $(pwd)"; echo oops >&2')
    assert done.returncode == 0, done.stderr
    said = done.stdout.decode()
    assert said.startswith("hello from /") and said.endswith("/work\n"), said
    assert done.stderr.decode() == "oops\n"


def test_exec_exit_code_becomes_kubectls(streams: Streams) -> None:
    done = streams.kubectl("exec", "shell", "--", "sh", "-c", "exit 3")
    assert done.returncode == 3
    assert b"command terminated with exit code 3" in done.stderr
    scraped = streams.kubectl("get", "--raw", "/metrics").stdout.decode()
    assert 'apiserver_request_total{code="101",resource="pods/exec",verb="create"}' in scraped
    missing = streams.kubectl("exec", "shell", "--", "no-such-command-here")
    assert missing.returncode != 0 and b"no-such-command-here" in missing.stderr


def test_exec_pipes_stdin(streams: Streams) -> None:
    done = streams.kubectl("exec", "-i", "shell", "--", "cat", stdin="hi\nthere\n")
    assert (done.returncode, done.stdout) == (0, b"hi\nthere\n"), done.stderr
    counted = streams.kubectl("exec", "-i", "shell", "--", "wc", "-c", stdin=b"x" * 200_000)
    assert counted.stdout.split() == [b"200000"], counted.stderr


def test_exec_with_a_terminal(streams: Streams) -> None:
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([KUBECTL, "--kubeconfig", str(streams.kubeconfig), "exec", "-it",
                             "shell", "--", "sh", "-c", "tty; echo on-a-terminal"],
                            stdin=terminal, stdout=terminal, stderr=terminal)
    os.close(terminal)
    output = b""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ready, _, _ = select.select([controller], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(controller, 4096)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        elif proc.poll() is not None:
            break
    os.close(controller)
    assert proc.wait(10) == 0, output
    assert b"/dev/pts/" in output and b"on-a-terminal" in output


def test_cp_to_and_from_a_pod(streams: Streams, tmp_path: Path) -> None:
    local = tmp_path / "data.bin"
    local.write_bytes(bytes(range(256)) * 64)
    up = streams.kubectl("cp", str(local), f"{NS}/shell:copied.bin")
    assert up.returncode == 0, up.stderr
    in_pod = streams.kubectl("exec", "shell", "--", "cat", "copied.bin")
    assert in_pod.stdout == local.read_bytes()
    back = tmp_path / "back.bin"
    down = streams.kubectl("cp", f"{NS}/shell:copied.bin", str(back))
    assert down.returncode == 0, down.stderr
    assert back.read_bytes() == local.read_bytes()


def test_attach_streams_the_running_containers_output(streams: Streams) -> None:
    proc = subprocess.Popen([KUBECTL, "--kubeconfig", str(streams.kubeconfig), "attach",
                             "shell"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        second = proc.stdout.readline()
    finally:
        proc.kill()
        proc.wait(10)
    # new output only (not the log from the start), as it is written
    assert (first, second) == (b"tick\n", b"tick\n")


def test_port_forward_reaches_an_http_server_in_a_pod(streams: Streams) -> None:
    pod_port, local_port = free_port(), free_port()
    streams.run_pod("web", [sys.executable, "-m", "http.server", str(pod_port), "--bind",
                            "127.0.0.1"])
    wrote = streams.kubectl("exec", "web", "--", "sh", "-c", "echo from the pod > hello.txt")
    assert wrote.returncode == 0, wrote.stderr
    wait_for(lambda: _listening(streams, "web", pod_port), 20)
    proc = subprocess.Popen([KUBECTL, "--kubeconfig", str(streams.kubeconfig),
                             "port-forward", "pod/web", f"{local_port}:{pod_port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert b"Forwarding from" in proc.stdout.readline()
        for _ in range(2):  # two connections through one forward
            with urllib.request.urlopen(f"http://127.0.0.1:{local_port}/hello.txt",
                                        timeout=15) as answer:
                assert answer.read() == b"from the pod\n"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(10)


def _listening(streams: Streams, pod: str, port: int) -> bool:
    """Whether the pod's server answers on its own localhost (its network's, not the
    node's)."""
    code = ("import http.client\n"
            f"conn = http.client.HTTPConnection('127.0.0.1', {port}, timeout=2)\n"
            "conn.request('HEAD', '/')\n"
            "print(conn.getresponse().status)")
    done = streams.kubectl("exec", pod, "--", sys.executable, "-c", code)
    return done.returncode == 0 and done.stdout.strip() == b"200"


def test_a_user_without_pods_exec_is_refused(streams: Streams) -> None:
    viewer = streams.user_kubeconfig("viewer")
    streams.kubectl("create", "role", "pod-reader", "--verb=get,list", "--resource=pods",
                    "-n", NS)
    streams.kubectl("create", "rolebinding", "viewer-reads", "--role=pod-reader",
                    "--user=viewer", "-n", NS)
    assert streams.kubectl("get", "pod", "shell", kubeconfig=viewer).returncode == 0
    for args in (["exec", "shell", "--", "true"], ["attach", "shell"]):
        refused = streams.kubectl(*args, kubeconfig=viewer, timeout=30)
        assert refused.returncode != 0
        assert b"forbidden" in refused.stderr.lower(), refused.stderr
        assert f"pods/{args[0]}".encode() in refused.stderr, refused.stderr
    streams.kubectl("create", "role", "pod-exec", "--verb=create", "--resource=pods/exec",
                    "-n", NS)
    streams.kubectl("create", "rolebinding", "viewer-execs", "--role=pod-exec",
                    "--user=viewer", "-n", NS)
    allowed = streams.kubectl("exec", "shell", "--", "echo", "now allowed", kubeconfig=viewer)
    assert (allowed.returncode, allowed.stdout) == (0, b"now allowed\n"), allowed.stderr


def _agent_get(port: int, context: ssl.SSLContext, path: str,
               token: str | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=15)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token
                     else {})
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def test_the_agents_port_needs_the_api_servers_certificate_or_an_allowed_token(
        streams: Streams, tmp_path: Path) -> None:
    port = streams.node_port()
    assert port is not None
    pki = streams.root / "api" / "pki"
    path = f"/containerLogs/{NS}/shell/main?tailLines=1"
    bare = ssl.create_default_context(cafile=str(pki / "node-ca.crt"))
    code, body = _agent_get(port, bare, path)
    assert code == 401 and b"tick" not in body
    # a client certificate of another CA: refused in the handshake
    forged = ssl.create_default_context(cafile=str(pki / "node-ca.crt"))
    forged.load_cert_chain(*map(str, client_cert(tmp_path, "gpushare:apiserver-node-client",
                                                 None)))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _agent_get(port, forged, path)
    # a token the API knows, for a user not allowed nodes/proxy: 403
    viewer = yaml.safe_load(streams.user_kubeconfig("outsider").read_text())
    token = viewer["users"][0]["user"]["token"]
    code, body = _agent_get(port, bare, path, token)
    assert code == 403 and b"tick" not in body
    # a certificate of the cluster CA is a user too: its name and organizations are asked
    # about (a kube-apiserver's kubelet client is in system:masters)
    for name, groups, expected in (("intruder", (), 403),
                                   ("kube-apiserver-kubelet-client", ("system:masters",), 200)):
        signed = ssl.create_default_context(cafile=str(pki / "node-ca.crt"))
        signed.load_cert_chain(*map(str, client_cert(tmp_path / name, name, pki, groups)))
        code, body = _agent_get(port, signed, path)
        assert code == expected, (name, code, body)
    # the admin token (allowed everything) and the API server's certificate get in
    assert _agent_get(port, bare, path, streams.server.admin_token) == (200, b"tick\n")
    apiserver = ssl.create_default_context(cafile=str(pki / "node-ca.crt"))
    apiserver.load_cert_chain(str(pki / "node-client.crt"), str(pki / "node-client.key"))
    assert _agent_get(port, apiserver, path) == (200, b"tick\n")


def test_the_agent_got_its_certificate_through_a_signing_request(streams: Streams) -> None:
    csrs = json.loads(streams.kubectl("get", "csr", "-o", "json").stdout)["items"]
    mine = [c for c in csrs if c["spec"]["signerName"] == "kubernetes.io/kubelet-serving"]
    assert len(mine) == 1 and mine[0]["status"]["certificate"]
    assert [c["type"] for c in mine[0]["status"]["conditions"]] == ["Approved"]
    key = streams.root / "agent" / "pki" / "node.key"
    assert key.stat().st_mode & 0o777 == 0o600
    signed = base64.b64decode(mine[0]["status"]["certificate"])
    assert (streams.root / "agent" / "pki" / "node.crt").read_bytes() == signed


def test_the_official_clients_stream_exec(streams: Streams) -> None:
    api = config.new_client_from_config(str(streams.kubeconfig))
    try:
        core = client.CoreV1Api(api)
        out = stream(core.connect_get_namespaced_pod_exec, "shell", NS,
                     command=["sh", "-c", "echo $GREETING; echo e >&2"], stderr=True,
                     stdin=False, stdout=True, tty=False)
        assert out == "hello\ne\n"
        ws = stream(core.connect_get_namespaced_pod_exec, "shell", NS,
                    command=["sh", "-c", "exit 5"], stderr=True, stdin=False, stdout=True,
                    tty=False, _preload_content=False)
        ws.run_forever(timeout=20)
        assert ws.returncode == 5
    finally:
        api.close()


def test_the_official_clients_port_forward(streams: Streams) -> None:
    from kubernetes.stream import portforward

    pod_port = free_port()
    streams.run_pod("echo-web", [sys.executable, "-m", "http.server", str(pod_port),
                                 "--bind", "127.0.0.1"])
    wait_for(lambda: _listening(streams, "echo-web", pod_port), 20)
    api = config.new_client_from_config(str(streams.kubeconfig))
    try:
        core = client.CoreV1Api(api)
        forward = portforward(core.connect_get_namespaced_pod_portforward, "echo-web", NS,
                              ports=str(pod_port))
        sock = forward.socket(pod_port)
        sock.setblocking(True)
        sock.settimeout(15)
        sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        sock.close()
        assert answer.startswith(b"HTTP/1.0 200"), answer[:200]
        assert forward.error(pod_port) is None
    finally:
        api.close()


def test_exec_runs_as_the_pods_sandboxed_user(streams: Streams) -> None:
    node = streams.kube.get(NODES.item(NODE)) or {}
    mode = node["metadata"]["annotations"]["gpushare.io/sandbox"]
    uid = int(streams.kubectl("exec", "shell", "--", "id", "-u").stdout)
    if mode == "none":  # an agent that is not root: pods run as its user, and say so
        assert uid == os.getuid()
        return
    assert uid >= 200000, (mode, uid)
    # the API server's data directory is not the pod's to read, even through exec
    peek = streams.kubectl("exec", "shell", "--", "cat",
                           str(streams.root / "api" / "admin.kubeconfig"))
    assert peek.returncode != 0 and b"token" not in peek.stdout
    assert (streams.root / "api" / "admin.kubeconfig").read_text().count("token") >= 1


def test_a_pod_cannot_use_the_agents_port_without_credentials(streams: Streams) -> None:
    """A pod on the node's network (hostNetwork) reaches the agent's port and is refused
    without credentials; a pod on its own network does not reach it at all."""
    port = streams.node_port()
    pod_port = free_port()
    streams.run_pod("prober", [sys.executable, "-m", "http.server", str(pod_port), "--bind",
                               "127.0.0.1"], host_network=True)
    probe = ("import ssl, urllib.request, urllib.error, sys\n"
             "context = ssl.create_default_context()\n"
             "context.check_hostname = False\n"
             "context.verify_mode = ssl.CERT_NONE\n"
             f"url = f'https://{{sys.argv[1]}}:{port}/containerLogs/{NS}/shell/main'\n"
             "try:\n"
             "    urllib.request.urlopen(url, context=context, timeout=5)\n"
             "    print('answered')\n"
             "except urllib.error.HTTPError as e:\n"
             "    print(e.code)\n"
             "except OSError as e:\n"
             "    print(type(e).__name__)\n")
    done = streams.kubectl("exec", "prober", "--", sys.executable, "-c", probe, "127.0.0.1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == b"401", done.stdout
    own = streams.kube.get(PODS.item("shell", NS))["status"]["podIP"]
    gateway = own.rsplit(".", 1)[0] + ".1"  # the node's address on the pod's bridge
    for address in ("127.0.0.1", gateway):
        done = streams.kubectl("exec", "shell", "--", sys.executable, "-c", probe, address)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() not in (b"401", b"answered", b""), (address, done.stdout)


def test_a_client_slow_to_make_its_streams_still_gets_output_and_exit_code(
        streams: Streams) -> None:
    """client-go drops frames that arrive before it has made its stream ends; a command
    that answers at once must not lose its output and status to a client that a loaded
    machine schedules late. This client drops what arrives in its first 0.2 s, as kubectl
    did in that case, and must still see both."""
    from urllib.parse import urlencode

    from websockets.sync.client import connect

    from gpushare.apiserver.http.nodeproxy import CLIENT_SETUP_S

    conf = yaml.safe_load(streams.kubeconfig.read_text())
    server = conf["clusters"][0]["cluster"]
    token = conf["users"][0]["user"]["token"]
    context = ssl.create_default_context(
        cadata=base64.b64decode(server["certificate-authority-data"]).decode())
    query = urlencode([("command", "sh"), ("command", "-c"),
                       ("command", "echo quick; exit 3"), ("stdout", "1"), ("stderr", "1")])
    url = server["server"].replace("https://", "wss://") + \
        f"/api/v1/namespaces/{NS}/pods/shell/exec?{query}"
    not_ready_for = 0.2
    assert not_ready_for < CLIENT_SETUP_S
    kept: list[bytes] = []
    with connect(url, ssl=context, subprotocols=["v5.channel.k8s.io"],  # type: ignore[list-item]
                 additional_headers={"Authorization": f"Bearer {token}"},
                 open_timeout=20) as ws:
        opened = time.monotonic()
        for message in ws:
            if time.monotonic() - opened >= not_ready_for:
                kept.append(message if isinstance(message, bytes) else message.encode())
    stdout = b"".join(m[1:] for m in kept if m[:1] == b"\x01")
    status = b"".join(m[1:] for m in kept if m[:1] == b"\x03")
    assert stdout == b"quick\n"
    assert json.loads(status)["details"]["causes"][0]["message"] == "3", status
