"""Per-tenant figures on the control plane's /metrics (pushed by the controllers process of
a real `gpushare up`): pods, GPUs held on the host, sync latency."""

from __future__ import annotations

import base64
import ssl
import tempfile

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families
from tenancy_support import pod_manifest, wait_for


def _scrape(kubeconfig) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    cfg = yaml.safe_load(kubeconfig.read_text())
    cluster = cfg["clusters"][0]["cluster"]
    with tempfile.NamedTemporaryFile("wb", suffix=".crt") as ca:
        ca.write(base64.b64decode(cluster["certificate-authority-data"]))
        ca.flush()
        r = httpx.get(cluster["server"] + "/metrics", timeout=30,
                      verify=ssl.create_default_context(cafile=ca.name),
                      headers={"Authorization": f"Bearer {cfg['users'][0]['user']['token']}"})
    assert r.status_code == 200, r.text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(r.text) for s in f.samples}


def _get(samples, name: str, **labels: str) -> float | None:
    found = [v for (n, lab), v in samples.items()
             if n == name and all(dict(lab).get(k) == want for k, want in labels.items())]
    return found[0] if len(found) == 1 else None


def test_tenant_pods_gpu_and_sync_latency_reach_metrics(platform):
    tenant = platform.tenant("metered", "--queue", "nlp")
    tenant.apply(pod_manifest("metered-train"))
    host = platform.host
    wait_for(lambda: [p for p in host.json("get", "pods", "-A", "-l",
                                           "tenancy.gpushare.io/tenant=metered")["items"]
                      if p["spec"].get("nodeName")], 60, "the tenant's host pod bound")
    kubeconfig = platform.data / "admin.kubeconfig"

    def figures():
        s = _scrape(kubeconfig)
        return s if _get(s, "gpushare_tenant_gpu_allocated", tenant="metered") == 0.33 else None

    samples = wait_for(figures, 60, "the tenant's GPU on /metrics")
    assert _get(samples, "gpushare_tenant_pods", tenant="metered") == 1
    assert _get(samples, "gpushare_tenant_phase", tenant="metered", phase="Ready") == 1
    # both directions are timed: tenant pod created -> host pod created, and
    # host pod bound -> tenant pod bound
    for direction in ("to_host", "to_tenant"):
        synced = _get(samples, "gpushare_tenant_sync_seconds_count", tenant="metered",
                      direction=direction)
        assert synced is not None and synced >= 1, direction
    assert _get(samples, "gpushare_tenant_pods", tenant="metered",
                component="controllers") == 1
