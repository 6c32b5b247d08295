"""Three teams, each with its own virtual cluster, share one declared L40S."""

from __future__ import annotations

from tenancy_support import pod_manifest, wait_for

TEAMS = ("nlp", "vision", "recsys")


def test_three_tenants_share_the_gpu_each_seeing_only_its_own_pod(platform):
    tenants = {t: platform.tenant(t, "--queue", t) for t in TEAMS}
    for team, kubectl in tenants.items():
        kubectl.apply(pod_manifest(f"{team}-train"))  # no queue label: the tenant's own
    host = platform.host

    def all_bound():
        pods = host.json("get", "pods", "-A", "-l", "tenancy.gpushare.io/tenant")["items"]
        return len(pods) == 3 and all(p["spec"].get("nodeName") == "box" for p in pods)

    wait_for(all_bound, 60, "three host pods bound to the one node")
    for team in TEAMS:
        wait_for(lambda t=team: (host.json("get", "queue", t).get("status") or {})
                 .get("allocated", {}).get("nvidia.com/gpu") == "330m", 30, f"{team} 330m")
    for team, kubectl in tenants.items():
        names = [p["metadata"]["name"] for p in kubectl.json("get", "pods", "-A")["items"]]
        assert names == [f"{team}-train"], names
        pod = wait_for(lambda k=kubectl, t=team: _running(k.json("get", "pod", f"{t}-train")),
                       60, f"{team} pod Running in the tenant")
        assert pod["spec"]["nodeName"] == "box"
        assert pod["metadata"]["labels"]["kai.scheduler/queue"] == team
        wait_for(lambda k=kubectl, t=team: "hello from" in k.run("logs", f"{t}-train").stdout,
                 30, f"{team} logs in the tenant")
        # exec in the tenant reaches the host pod that really runs
        shown = kubectl.run("exec", f"{team}-train", "--", "sh", "-c",
                            'echo "exec in $HOSTNAME"; exit 2', check=False)
        assert shown.returncode == 2, shown.stderr
        assert shown.stdout.startswith("exec in "), shown.stdout
        nodes = kubectl.json("get", "nodes")["items"]
        assert [n["metadata"]["name"] for n in nodes] == ["box"]
        queues = [q["metadata"]["name"] for q in kubectl.json("get", "queues")["items"]]
        assert queues == [team]

    # Delete in the tenant: the host pod goes too.
    tenants["nlp"].run("delete", "pod", "nlp-train", "--wait=false")
    wait_for(lambda: not host.json("get", "pods", "-A", "-l",
                                   "tenancy.gpushare.io/tenant=nlp")["items"], 60,
             "nlp's host pod deleted")
    wait_for(lambda: not tenants["nlp"].json("get", "pods")["items"], 60,
             "nlp's tenant pod gone")


def _running(pod):
    return pod if pod["status"].get("phase") == "Running" else None


def test_tenant_list_and_bad_input(platform):
    import json

    done = platform.gpushare("tenant", "list", "--json", "--data-dir", str(platform.data))
    rows = {r["name"]: r for r in json.loads(done.stdout)}
    assert set(TEAMS) <= set(rows)
    assert rows["vision"]["queues"] == ["vision"] and rows["vision"]["phase"] == "Ready"
    assert rows["vision"]["endpoint"] == "/clusters/vision"
    # the API quota the platform set (the defaults here) and what the tenant holds of it
    assert rows["vision"]["maxObjects"] == 10_000
    assert rows["vision"]["maxStorageBytes"] == 256 * 1024**2
    assert 0 < rows["vision"]["objects"] < 10_000 and rows["vision"]["storageBytes"] > 0
    table = platform.gpushare("tenant", "list", "--data-dir", str(platform.data)).stdout
    assert table.splitlines()[0].split()[:3] == ["NAME", "QUEUES", "PHASE"]
    assert "OBJECTS" in table.splitlines()[0] and "/10000" in table
    bad = platform.gpushare("tenant", "create", "ok-name", "--queue", "nlp", "--max-objects",
                            "-1", "--data-dir", str(platform.data), check=False)
    assert bad.returncode != 0 and "spec.maxObjects" in bad.stderr
    bad = platform.gpushare("tenant", "create", "Bad_Name", "--queue", "nlp", "--data-dir",
                            str(platform.data), check=False)
    assert bad.returncode != 0 and "metadata.name" in bad.stderr
    bad = platform.gpushare("tenant", "create", "ok-name", "--queue", "nlp", "--max-pods",
                            "-3", "--data-dir", str(platform.data), check=False)
    assert bad.returncode != 0 and "spec.maxPods" in bad.stderr
    assert platform.host.run("get", "virtualcluster", "ok-name", check=False).returncode != 0
    assert platform.gpushare("tenant", "delete", "nope", "--data-dir", str(platform.data),
                             check=False).returncode != 0
