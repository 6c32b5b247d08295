"""kubectl inside a tenant as on a real cluster: `get --raw` (which drops the server URL's
path, so the tenant's token reaches the root paths and is served in its own cluster, never
the host's) and `top pod` (its pods' figures, from the host pods they run as)."""

from __future__ import annotations

import json

from tenancy_support import Platform, pod_manifest, wait_for

BUSY = "x = bytearray(64 * 1024 * 1024)\nimport time\nwhile True: sum(range(10000))"


def test_raw_requests_inside_a_tenant_reach_the_tenant(platform: Platform) -> None:
    tenant = platform.tenant("rawteam", "--queue", "nlp")
    tenant.apply(pod_manifest("raw-pod"))
    namespaces = json.loads(tenant.run("get", "--raw", "/api/v1/namespaces").stdout)
    names = {n["metadata"]["name"] for n in namespaces["items"]}
    assert "default" in names and not any(n.startswith("vc-") for n in names)
    pods = json.loads(tenant.run("get", "--raw", "/api/v1/namespaces/default/pods").stdout)
    assert [p["metadata"]["name"] for p in pods["items"]] == ["raw-pod"]
    # The host's objects stay out of reach: its nodes as the tenant sees them are views
    nodes = json.loads(tenant.run("get", "--raw", "/api/v1/nodes").stdout)["items"]
    assert all(n["metadata"]["labels"].get("tenancy.gpushare.io/view") == "true"
               for n in nodes)
    wait_for(lambda: platform.host.json("get", "pods", "-n", "vc-rawteam")["items"], 60,
             "the host pod")
    host_side = json.loads(tenant.run("get", "--raw", "/api/v1/namespaces/vc-rawteam/pods"
                                      ).stdout)
    assert host_side["items"] == []  # the host namespace is not the tenant's


def test_top_pod_inside_a_tenant_shows_its_pods(platform: Platform) -> None:
    tenant = platform.tenant("topteam", "--queue", "vision")
    tenant.apply(pod_manifest("busy", fraction="0.25", command=BUSY))

    def top() -> dict[str, list[str]] | None:
        done = tenant.run("top", "pod", "--no-headers", check=False)
        if done.returncode != 0:
            return None
        rows = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()}
        return rows if "busy" in rows else None

    rows = wait_for(top, 90, "kubectl top pod in the tenant")
    assert set(rows) == {"busy"}  # nothing of the host or of other tenants
    cpu, memory = rows["busy"]
    assert cpu.endswith("m") and memory.endswith("Mi") and int(memory[:-2]) >= 64
    one = json.loads(tenant.run("get", "--raw",
                                "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/busy"
                                ).stdout)
    assert one["metadata"]["name"] == "busy" and one["metadata"]["namespace"] == "default"
