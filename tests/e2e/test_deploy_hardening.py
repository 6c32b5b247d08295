"""What the deploy/ manifests promise a cluster operator, checked on what `kubectl kustomize`
and the real `helm` render: every overlay and the chart lint clean; every container is
probed on a port it declares, has requests and limits, and runs under the restricted
securityContext (the node agent alone privileged); every object carries the labels the
shipped Prometheus configuration selects on, and that configuration keeps at least one
rendered pod; the chart and the `cluster` overlay render the same objects with the same
containers; leader election is a namespaced Role; default-queue and the priority classes
are the ones `gpushare up` creates."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import yaml
from test_helm_chart import CHART, _helm, _kustomize, _template

from gpushare.apiserver.registry.builtin_kinds import PRIORITY_CLASSES
from gpushare.cli.install import DEPLOY
from gpushare.cli.up import DEFAULT_QUEUE

OVERLAYS = sorted(p.name for p in (DEPLOY / "overlays").iterdir() if p.is_dir())
CHART_VALUES = ([], ["--set", "agent.enabled=true", "--set", "serviceMonitor.enabled=true"],
                ["--set", "gpuSharing.enabled=true"], ["--set", "tenants.enabled=true"])
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "Job")
RESTRICTED = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
              "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
              "seccompProfile": {"type": "RuntimeDefault"}}


def _rendered() -> dict[str, list[dict]]:
    out = {f"overlay {o}": _kustomize(o) for o in OVERLAYS}
    for values in CHART_VALUES:
        out[f"chart {' '.join(values)}"] = _template(*values)
    return out


def _pods(objects: list[dict]) -> list[tuple[dict, dict]]:
    return [(o, o["spec"]["template"]["spec"]) for o in objects if o["kind"] in WORKLOADS]


def test_every_overlay_renders_and_the_chart_lints_clean():
    assert {"cluster", "cluster-with-agent", "cluster-with-gpu-sharing",
            "cluster-with-servicemonitor", "cluster-with-tenants", "standalone"} <= set(OVERLAYS)
    for overlay in OVERLAYS:
        assert _kustomize(overlay), overlay
    for values in CHART_VALUES:
        done = subprocess.run([_helm(), "lint", "--strict", str(CHART), *values],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "0 chart(s) failed" in done.stdout
        assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout


def test_every_container_is_probed_limited_and_restricted():
    seen = set()
    for where, objects in _rendered().items():
        for workload, pod in _pods(objects):
            component = workload["metadata"]["labels"]["app.kubernetes.io/component"]
            for c in pod["containers"]:
                what = f"{where}: {workload['kind']}/{workload['metadata']['name']}/{c['name']}"
                seen.add((workload["kind"], c["name"]))
                _check_probes(component, c, what)
                for kind in ("requests", "limits"):
                    assert {"cpu", "memory"} <= set(c["resources"][kind]), what
                context = c["securityContext"]
                assert context["readOnlyRootFilesystem"] is True, what
                if component == "agent":  # the one privileged exception, commented in place
                    assert context["privileged"] is True, what
                    continue
                if component == "node-daemon":  # root and the host's PIDs, nothing more
                    assert context == {"runAsUser": 0, "allowPrivilegeEscalation": False,
                                       "readOnlyRootFilesystem": True,
                                       "capabilities": {"drop": ["ALL"]}}, what
                    assert pod["hostPID"] is True and "hostNetwork" not in pod, what
                    assert "hostIPC" not in pod, what
                    continue
                assert context == RESTRICTED, what
                assert pod["securityContext"]["runAsNonRoot"] is True, what
                assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
                assert "hostNetwork" not in pod and "hostPID" not in pod, what
                # what is writable is an emptyDir: the root filesystem is read-only
                volumes = {v["name"]: v for v in pod["volumes"]}
                for mount in c["volumeMounts"]:
                    if not mount.get("readOnly"):
                        # the tenant plane's store alone is on a volume of its own
                        stored = component == "tenant-plane" and mount["name"] == "data"
                        kind = "persistentVolumeClaim" if stored else "emptyDir"
                        assert kind in volumes[mount["name"]], (what, mount)
    assert seen == {("Deployment", "controllers"), ("DaemonSet", "agent"),
                    ("Deployment", "webhook"), ("DaemonSet", "node-daemon"),
                    ("Deployment", "apiserver")}


def _check_probes(component: str, c: dict, what: str) -> None:
    """Probes on a declared port: the health port, or the API server's own (HTTPS) port
    where /livez and /readyz need no token."""
    ports = {p["name"]: p["containerPort"] for p in c.get("ports") or []}
    port = "https" if component == "tenant-plane" else "health"
    for probe in ("livenessProbe", "readinessProbe"):
        get = c[probe]["httpGet"]
        assert get["port"] in ports and get["port"] == port, what
    assert c["livenessProbe"]["httpGet"]["path"] == "/livez", what
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz", what
    flag = "--port" if component == "tenant-plane" else "--health-port"
    assert f"{flag}={ports[port]}" in c["args"], what


def test_every_object_carries_the_gpushare_labels():
    for where, objects in _rendered().items():
        for o in objects:
            labels = o["metadata"].get("labels") or {}
            what = f"{where}: {o['kind']}/{o['metadata']['name']}"
            assert labels.get("app.kubernetes.io/part-of") == "gpushare", what
            assert labels.get("app.kubernetes.io/name") == "gpushare", what
            if o["kind"] != "Namespace":
                assert labels.get("app.kubernetes.io/component"), what
            if o["kind"] in WORKLOADS:
                template = o["spec"]["template"]["metadata"]["labels"]
                assert template["app.kubernetes.io/part-of"] == "gpushare", what


def _sanitize(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _targets(role: str, objects: list[dict]) -> list[dict[str, str]]:
    """The discovered labels Prometheus' kubernetes_sd_configs gives each target of
    ``role`` among the rendered objects (one per container port, as it does)."""
    out = []
    if role == "pod":
        for workload, pod in _pods(objects):
            labels = workload["spec"]["template"]["metadata"]["labels"]
            for c in pod["containers"]:
                for port in c.get("ports") or []:
                    meta = {f"__meta_kubernetes_pod_label_{_sanitize(k)}": v
                            for k, v in labels.items()}
                    meta |= {"__meta_kubernetes_namespace": workload["metadata"]["namespace"],
                             "__meta_kubernetes_pod_name": workload["metadata"]["name"],
                             "__meta_kubernetes_pod_container_name": c["name"],
                             "__meta_kubernetes_pod_container_port_name": port["name"]}
                    out.append(meta)
    elif role in ("service", "endpoints"):
        for service in (o for o in objects if o["kind"] == "Service"):
            for port in service["spec"]["ports"]:
                meta = {f"__meta_kubernetes_service_label_{_sanitize(k)}": v
                        for k, v in service["metadata"]["labels"].items()}
                meta |= {"__meta_kubernetes_namespace": service["metadata"]["namespace"],
                         "__meta_kubernetes_service_name": service["metadata"]["name"],
                         "__meta_kubernetes_service_port_name": port["name"],
                         "__meta_kubernetes_endpoint_port_name": port["name"]}
                out.append(meta)
    return out


def _kept(job: dict, objects: list[dict]) -> list[dict[str, str]]:
    """The targets ``job``'s keep/drop relabelling leaves (regexes anchored, as
    Prometheus anchors them)."""
    kept = []
    for sd in job["kubernetes_sd_configs"]:
        names = (sd.get("namespaces") or {}).get("names")
        for target in _targets(sd["role"], objects):
            if names and target["__meta_kubernetes_namespace"] not in names:
                continue
            keep = True
            for rule in job.get("relabel_configs") or []:
                action = rule.get("action", "replace")
                if action not in ("keep", "drop"):
                    continue
                value = rule.get("separator", ";").join(
                    target.get(label, "") for label in rule["source_labels"])
                matched = re.fullmatch(rule.get("regex", "(.*)"), value) is not None
                if matched != (action == "keep"):
                    keep = False
                    break
            if keep:
                kept.append(target)
    return kept


def test_the_shipped_prometheus_config_selects_rendered_targets():
    config = yaml.safe_load((DEPLOY / "monitoring" / "prometheus.yml").read_text())
    jobs = [j for j in config["scrape_configs"] if j.get("kubernetes_sd_configs")]
    assert jobs
    for overlay in ("cluster", "cluster-with-agent"):
        objects = _kustomize(overlay)
        for job in jobs:
            kept = _kept(job, objects)
            assert kept, f"{job['job_name']} keeps no target of overlay {overlay}"
            assert all(t.get("__meta_kubernetes_pod_container_port_name",
                             t.get("__meta_kubernetes_endpoint_port_name")) == "metrics"
                       for t in kept)
    # A pod of something else in the namespace is not scraped.
    stranger = {"kind": "Deployment", "metadata": {"name": "other", "namespace": "gpushare"},
                "spec": {"template": {"metadata": {"labels": {"app": "other"}}, "spec": {
                    "containers": [{"name": "x", "ports": [{"name": "metrics"}]}]}}}}
    for job in jobs:
        assert not _kept(job, [stranger])


def test_the_servicemonitor_is_opt_in_and_selects_the_metrics_services():
    assert all(o["kind"] != "ServiceMonitor" for o in _kustomize("cluster") + _template())
    for objects in (_kustomize("cluster-with-servicemonitor"),
                    _template("--set", "serviceMonitor.enabled=true")):
        monitor = next(o for o in objects if o["kind"] == "ServiceMonitor")
        wanted = monitor["spec"]["selector"]["matchLabels"]
        ports = {e["port"] for e in monitor["spec"]["endpoints"]}
        services = [s for s in objects if s["kind"] == "Service"
                    and wanted.items() <= s["metadata"]["labels"].items()
                    and s["metadata"]["namespace"] in monitor["spec"]["namespaceSelector"][
                        "matchNames"]]
        assert any(p["name"] in ports for s in services for p in s["spec"]["ports"])
        # and each such Service selects the pods that serve the port
        deployment = next(o for o in objects if o["kind"] == "Deployment")
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert any(s["spec"]["selector"].items() <= labels.items() for s in services)


def _containers(objects: list[dict]) -> dict[tuple[str, str], Any]:
    return {(w["kind"], c["name"]): (pod.get("securityContext"), c.get("securityContext"),
                                     c.get("livenessProbe"), c.get("readinessProbe"),
                                     c.get("resources"), c.get("ports"), c.get("volumeMounts"))
            for w, pod in _pods(objects) for c in pod["containers"]}


def _keys(objects: list[dict]) -> set[tuple[str, str, str]]:
    return {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace", ""))
            for o in objects if o["kind"] != "Namespace"}  # helm makes the namespace itself


def test_chart_and_overlay_render_the_same_objects_and_containers():
    for overlay, values in (("cluster", []), ("cluster-with-agent", ["--set",
                                                                    "agent.enabled=true"])):
        chart, kustomized = _template(*values), _kustomize(overlay)
        assert _keys(chart) == _keys(kustomized), overlay
        assert _containers(chart) == _containers(kustomized), overlay
        for key in {(o["kind"], o["metadata"]["name"]) for o in chart}:
            a = next(o for o in chart if (o["kind"], o["metadata"]["name"]) == key)
            b = next(o for o in kustomized if (o["kind"], o["metadata"]["name"]) == key)
            assert a["metadata"].get("labels") == b["metadata"].get("labels"), key
            assert a.get("rules") == b.get("rules"), key


def test_leader_election_is_a_namespaced_role_only():
    for objects in (_kustomize("cluster"), _template("--namespace", "gpu-system")):
        for role in (o for o in objects if o["kind"] == "ClusterRole"):
            for rule in role["rules"]:
                assert "leases" not in rule.get("resources", []), role["metadata"]["name"]
        deployment = next(o for o in objects if o["kind"] == "Deployment")
        namespace = deployment["metadata"]["namespace"]
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        assert f"--leader-elect-resource-namespace={namespace}" in args
        roles = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects
                 if o["kind"] == "Role"}
        assert set(roles) == {(namespace, "gpushare-leader-election"),
                              ("kube-node-lease", "gpushare-node-leases")}
        for (ns, name), role in roles.items():
            assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"],
                                      "resources": ["leases"],
                                      "verbs": ["get", "list", "watch", "create", "update",
                                                "patch"]}]
            binding = next(o for o in objects if o["kind"] == "RoleBinding"
                           and o["metadata"]["name"] == name)
            assert binding["metadata"]["namespace"] == ns
            assert binding["subjects"] == [{"kind": "ServiceAccount",
                                            "name": "gpushare-controllers",
                                            "namespace": namespace}]


def test_default_queue_and_priority_classes_are_those_gpushare_up_creates():
    for objects in (_kustomize("cluster"), _template()):
        queue = next(o for o in objects if o["kind"] == "Queue")
        assert queue["metadata"]["name"] == DEFAULT_QUEUE["metadata"]["name"] == "default-queue"
        assert "namespace" not in queue["metadata"]  # Queues are cluster-scoped
        assert queue["spec"] == DEFAULT_QUEUE["spec"]
        classes = {o["metadata"]["name"]: o["value"] for o in objects
                   if o["kind"] == "PriorityClass"}
        assert classes == PRIORITY_CLASSES


def test_every_namespaced_object_of_an_overlay_names_its_namespace():
    """`kubectl apply -k` (and `gpushare install`) put an object without a namespace into
    the kubeconfig's current one: on a real cluster the tenant plane's Deployment, Service
    and claim landed in `default`, where `gpushare-apiserver.gpushare.svc` (the address in
    the tenants' kubeconfigs and in its certificate) does not reach them."""
    from gpushare.apiserver.registry.builtin_kinds import builtin_resources

    scoped = {(r.group, r.kind): r.namespaced for r in builtin_resources()}
    # kinds the embedded server does not serve: the Prometheus operator's, the claim
    scoped[("monitoring.coreos.com", "ServiceMonitor")] = True
    scoped[("", "PersistentVolumeClaim")] = True
    for where, objects in _rendered().items():
        if not where.startswith("overlay "):
            continue  # helm installs into the release namespace
        for crd in (o for o in objects if o["kind"] == "CustomResourceDefinition"):
            scoped[(crd["spec"]["group"], crd["spec"]["names"]["kind"])] = (
                crd["spec"]["scope"] == "Namespaced")
        for o in objects:
            group = o["apiVersion"].rpartition("/")[0]
            what = f"{where}: {o['kind']}/{o['metadata']['name']}"
            assert (group, o["kind"]) in scoped, f"{what}: unknown kind"
            if scoped[(group, o["kind"])]:
                assert o["metadata"].get("namespace"), what


HOST_ACCESS = ("hostPID", "hostNetwork", "hostIPC")


def _needs_privileged_level(pod: dict) -> bool:
    """Whether Pod Security's baseline level refuses the pod: host namespaces, hostPath
    volumes, host ports or a privileged container."""
    containers = pod.get("containers", []) + pod.get("initContainers", [])
    return (any(pod.get(k) for k in HOST_ACCESS)
            or any("hostPath" in v for v in pod.get("volumes") or [])
            or any(p.get("hostPort") for c in containers for p in c.get("ports") or [])
            or any((c.get("securityContext") or {}).get("privileged") for c in containers))


def test_an_overlay_with_host_access_pods_lets_its_namespace_run_them():
    """A cluster whose PodSecurity admission enforces baseline by default (a common
    hardening) refuses every pod of such a DaemonSet, unless the namespace says otherwise:
    kube-apiserver refused the node daemon's pods ("violates PodSecurity baseline:latest:
    host namespaces (hostPID=true), hostPath volumes")."""
    for overlay in OVERLAYS:
        objects = _kustomize(overlay)
        namespace = next(o for o in objects if o["kind"] == "Namespace")
        enforce = (namespace["metadata"].get("labels") or {}).get(
            "pod-security.kubernetes.io/enforce")
        hosted = [o["metadata"]["name"] for o, pod in _pods(objects)
                  if _needs_privileged_level(pod)]
        assert (enforce == "privileged") == bool(hosted), (overlay, hosted, enforce)
