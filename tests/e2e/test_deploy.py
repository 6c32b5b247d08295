"""deploy/: generated from the code, rendered by ``kubectl kustomize``, applied to the
embedded server with ``kubectl apply --server-side``, and the three-team pattern run by
controllers started with the rendered manifests' settings; ``gpushare install`` and
``uninstall`` round-trip."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from e2e_support import KUBECTL, add_node, wait_for
from test_seed_pattern import QUEUES, TEAMS, team_pod

from gpushare.cli.install import DEPLOY, generated_files, render_crds, render_rbac
from gpushare.controllers.scheduling.scheduler_config import load_scheduler_config


def test_generated_manifests_are_current():
    assert (DEPLOY / "base" / "crds.yaml").read_text() == render_crds(), (
        "run `gpushare manifests write`")
    assert (DEPLOY / "base" / "rbac.yaml").read_text() == render_rbac()
    for path, content in generated_files().items():
        assert path.read_text() == content, f"{path}: run `gpushare manifests write`"
    names = {d["metadata"]["name"] for d in yaml.safe_load_all(render_crds())}
    assert {"queues.scheduling.run.ai", "podgroups.scheduling.run.ai"} <= names


def _render(overlay: str) -> list[dict]:
    done = subprocess.run([KUBECTL, "kustomize", str(DEPLOY / "overlays" / overlay)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _settings(objects: list[dict], tmp_path: Path) -> tuple[tuple[str, ...] | None, Path]:
    """The controllers' --only set and scheduler config file, as the manifests give them."""
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--leader-elect" in args and deployment["spec"]["replicas"] == 2
    only = tuple(a.split("=", 1)[1] for a in args if a.startswith("--only="))
    config_map = next(o for o in objects if o["kind"] == "ConfigMap")
    path = tmp_path / "scheduler.yaml"
    path.write_text(config_map["data"]["scheduler.yaml"])
    return only or None, path


def test_rendered_deploy_applies_server_side_and_runs_the_three_teams(server, kubectl,
                                                                      tmp_path):
    from gpushare.controller_manager import DEFAULT, start_controllers

    cluster = _settings(_render("cluster"), tmp_path)[0]
    assert cluster == ("pod-grouper", "scheduler", "queue-status", "podgroup-status",
                       "max-runtime", "node-lifecycle", "static-node-pods")
    objects = _render("standalone")
    rendered = subprocess.run([KUBECTL, "kustomize", str(DEPLOY / "overlays" / "standalone")],
                              capture_output=True, text=True, check=True).stdout
    kubectl.run("apply", "--server-side", "-f", "-", stdin=rendered)
    assert kubectl.json("get", "deployment", "-n", "gpushare",
                        "gpushare-controllers")["spec"]["replicas"] == 2
    kubectl.run("get", "crd", "queues.scheduling.run.ai", "podgroups.scheduling.run.ai")
    kubectl.run("auth", "can-i", "create", "pods/binding",
                "--as=system:serviceaccount:gpushare:gpushare-controllers")

    only, config_path = _settings(objects, tmp_path)
    running = start_controllers(str(server.kubeconfig), enabled=only or DEFAULT,
                                scheduler_config=load_scheduler_config(config_path))
    try:
        add_node(server.kubeconfig, "gpu-node-1", "1xL40S")
        kubectl.run("apply", "-f", "-", stdin=QUEUES)
        kubectl.run("apply", "-f", "-", stdin="".join(team_pod(t) for t in TEAMS))

        def allocated():
            queues = {q["metadata"]["name"]: q for q in kubectl.json("get", "queues")["items"]}
            got = {t: (queues[t].get("status") or {}).get("allocated", {})
                   .get("nvidia.com/gpu") for t in TEAMS}
            return got if set(got.values()) == {"330m"} else None

        wait_for(allocated, what="each team allocated 330m")
    finally:
        running.stop()


def test_install_and_uninstall(server, kubectl):
    gpushare = [sys.executable, "-m", "gpushare.cli.main"]
    done = subprocess.run([*gpushare, "install", "--kubeconfig", str(server.kubeconfig),
                           "--overlay", "cluster"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "deployment/gpushare-controllers serverside-applied" in done.stdout
    dep = kubectl.json("get", "deployment", "-n", "gpushare", "gpushare-controllers",
                       "--show-managed-fields")
    assert any(f["manager"] == "gpushare-install" for f in dep["metadata"]["managedFields"])
    # Applying again changes nothing and fails nothing.
    again = subprocess.run([*gpushare, "install", "--kubeconfig", str(server.kubeconfig)],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    done = subprocess.run([*gpushare, "uninstall", "--kubeconfig", str(server.kubeconfig)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert kubectl.run("get", "deployment", "-n", "gpushare", "gpushare-controllers",
                       check=False).returncode != 0
    kubectl.run("get", "crd", "queues.scheduling.run.ai")  # kept without --crds


def test_uninstall_crds_removes_their_objects_and_finalizers(server, kubectl):
    """What a chart or an install leaves on the cluster (Queues, PodGroups, held by
    finalizers) goes with `gpushare uninstall --crds`, and then the CRDs."""
    gpushare = [sys.executable, "-m", "gpushare.cli.main"]
    done = subprocess.run([*gpushare, "install", "--kubeconfig", str(server.kubeconfig)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "queue/default-queue serverside-applied" in done.stdout
    assert kubectl.json("get", "queue", "default-queue")["spec"]["resources"]["gpu"][
        "quota"] == 0
    kubectl.run("apply", "-f", "-", stdin=QUEUES)
    kubectl.run("patch", "queue", TEAMS[0], "--type=merge", "-p",
                '{"metadata":{"finalizers":["example.com/hold"]}}')
    done = subprocess.run([*gpushare, "uninstall", "--kubeconfig", str(server.kubeconfig),
                           "--crds"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "customresourcedefinition/queues.scheduling.run.ai deleted" in done.stdout
    wait_for(lambda: kubectl.run("get", "crd", "queues.scheduling.run.ai",
                                 check=False).returncode != 0, what="the Queue CRD gone")


def test_the_gpu_sharing_overlay_installs_and_its_webhook_configuration_is_served(
        server, kubectl):
    gpushare = [sys.executable, "-m", "gpushare.cli.main"]
    done = subprocess.run([*gpushare, "install", "--kubeconfig", str(server.kubeconfig),
                           "--overlay", "cluster-with-gpu-sharing"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for name in ("daemonset/gpushare-node-daemon", "deployment/gpushare-webhook",
                 "mutatingwebhookconfiguration/gpushare-gpu-fractions"):
        assert f"{name} serverside-applied" in done.stdout, done.stdout
    config = kubectl.json("get", "mutatingwebhookconfiguration", "gpushare-gpu-fractions")
    assert config["webhooks"][0]["failurePolicy"] == "Ignore"
    # the webhook is not running here (no image runs): under Ignore, pods are still created,
    # unprepared, and the scheduler would not bind a fractional one
    kubectl.run("run", "plain", "--image=busybox", "--restart=Never", "-n", "default")
    pod = kubectl.json("get", "pod", "plain", "-n", "default")
    assert "envFrom" not in pod["spec"]["containers"][0]
    done = subprocess.run([*gpushare, "uninstall", "--kubeconfig", str(server.kubeconfig),
                           "--overlay", "cluster-with-gpu-sharing"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert kubectl.run("get", "mutatingwebhookconfiguration", "gpushare-gpu-fractions",
                       check=False).returncode != 0


def _burst_pod(team: str, name: str) -> str:
    return team_pod(team).replace(f"name: {team}-notebook", f"name: {name}")


def test_the_cluster_overlay_reclaims_from_a_static_node(server, kubectl, tmp_path):
    """The `cluster` overlay's controllers alone (kube-controller-manager runs the rest)
    finish a reclaim on a `gpushare node add` node: the evicted pods' graceful deletion
    waits for a node agent that such a node never has (kube-apiserver, like the embedded
    server, keeps a bound pod Terminating until its node finishes it), so without the
    static-node-pods controller the reclaimers stayed pipelined behind them for ever."""
    from gpushare.controller_manager import start_controllers

    only, config_path = _settings(_render("cluster"), tmp_path)
    assert only is not None and "static-node-pods" in only
    running = start_controllers(str(server.kubeconfig), enabled=only,
                                scheduler_config=load_scheduler_config(config_path))
    try:
        add_node(server.kubeconfig, "gpu-node-1", "1xL40S")
        kubectl.run("apply", "-f", "-", stdin=QUEUES)
        kubectl.run("apply", "-f", "-", stdin="".join(
            _burst_pod("nlp", f"nlp-{i}") for i in range(3)))

        def bound(names):
            pods = {p["metadata"]["name"]: p for p in kubectl.json("get", "pods")["items"]}
            return all((pods.get(n) or {}).get("spec", {}).get("nodeName") for n in names)

        wait_for(lambda: bound([f"nlp-{i}" for i in range(3)]), what="nlp burst to 990m")
        kubectl.run("apply", "-f", "-", stdin=team_pod("vision") + team_pod("recsys"))
        wait_for(lambda: bound(["vision-notebook", "recsys-notebook"]),
                 what="vision and recsys bound once two nlp pods are reclaimed")
        left = [p["metadata"]["name"] for p in kubectl.json("get", "pods")["items"]
                if p["metadata"]["name"].startswith("nlp-")]
        assert len(left) == 1, left
    finally:
        running.stop()
