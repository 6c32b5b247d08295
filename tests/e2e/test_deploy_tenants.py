"""The tenants' control plane on a Kubernetes cluster: the kustomize overlay
``cluster-with-tenants`` and the chart with ``tenants.enabled`` render the same objects (the
gpushare API server as a single-writer Deployment on a PersistentVolumeClaim, its Service,
the tenancy controller pointed at it), and what they render holds together: the
controllers mount the tenant plane's kubeconfig where ``--tenant-kubeconfig`` reads it,
the Service reaches the server's port and its names are in the serving certificate."""

from __future__ import annotations

import subprocess

from test_helm_chart import CHART, _by_name, _helm, _kustomize, _subjects, _template

TENANT_PLANE = (("Deployment", "gpushare-apiserver"), ("Service", "gpushare-apiserver"),
                ("PersistentVolumeClaim", "gpushare-tenant-plane"))


def test_chart_with_tenants_renders_what_the_overlay_renders():
    chart = _by_name(_template("--set", "tenants.enabled=true"))
    overlay = _by_name(_kustomize("cluster-with-tenants"))
    assert set(chart) == set(overlay) - {("Namespace", "gpushare")}
    assert set(TENANT_PLANE) <= set(chart)
    for key in (*TENANT_PLANE, ("Deployment", "gpushare-controllers"),
                ("ClusterRoleBinding", "gpushare-tenancy")):
        assert chart[key].get("spec") == overlay[key].get("spec"), key
        assert _subjects(chart[key]) == _subjects(overlay[key]), key
    # without the value the chart has no tenant plane and the controllers no tenants
    plain = _by_name(_template())
    assert not set(TENANT_PLANE) & set(plain)
    args = plain[("Deployment", "gpushare-controllers")]["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert "--only=tenancy" not in args
    assert not [a for a in args if a.startswith("--tenant-kubeconfig")]


def test_the_tenant_plane_is_one_writer_reached_through_its_service():
    objects = _by_name(_kustomize("cluster-with-tenants"))
    server = objects[("Deployment", "gpushare-apiserver")]["spec"]
    assert server["replicas"] == 1 and server["strategy"] == {"type": "Recreate"}
    pod = server["template"]["spec"]
    container = pod["containers"][0]
    data_dir = next(a.split("=", 1)[1] for a in container["args"]
                    if a.startswith("--data-dir="))
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == data_dir)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["persistentVolumeClaim"]["claimName"] == "gpushare-tenant-plane"
    claim = objects[("PersistentVolumeClaim", "gpushare-tenant-plane")]["spec"]
    assert claim["accessModes"] == ["ReadWriteOnce"]
    service = objects[("Service", "gpushare-apiserver")]["spec"]
    assert service["selector"].items() <= server["template"]["metadata"]["labels"].items()
    port_names = {p["name"] for p in container["ports"]}
    assert {p["targetPort"] for p in service["ports"]} <= port_names
    sans = {a.split("=", 1)[1] for a in container["args"] if a.startswith("--tls-san=")}
    assert "gpushare-apiserver.gpushare.svc" in sans

    controllers = objects[("Deployment", "gpushare-controllers")]["spec"]["template"]["spec"]
    args = controllers["containers"][0]["args"]
    assert "--only=tenancy" in args
    kubeconfig = next(a.split("=", 1)[1] for a in args
                      if a.startswith("--tenant-kubeconfig="))
    mounts = {m["mountPath"]: m["name"] for m in controllers["containers"][0]["volumeMounts"]}
    folder, _, key = kubeconfig.rpartition("/")
    secret = next(v for v in controllers["volumes"] if v["name"] == mounts[folder])["secret"]
    assert secret["secretName"] == "gpushare-tenant-plane" and key == "kubeconfig"


def test_chart_with_tenants_lints_and_takes_extra_certificate_names():
    done = subprocess.run([_helm(), "lint", "--strict", str(CHART), "--set",
                           "tenants.enabled=true", "--set", "tenants.tlsSANs={vc.example.com}"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "[WARNING]" not in done.stdout, done.stdout + done.stderr
    objects = _by_name(_template("--set", "tenants.enabled=true", "--set",
                                 "tenants.tlsSANs={vc.example.com}", "--namespace", "gpu"))
    args = objects[("Deployment", "gpushare-apiserver")]["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert "--tls-san=vc.example.com" in args
    assert "--tls-san=gpushare-apiserver.gpu.svc" in args
