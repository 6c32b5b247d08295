"""deploy/monitoring: the Grafana dashboard asks only for metrics gpushare exports; the
scrape configuration and RBAC give Prometheus exactly the access /metrics needs."""

from __future__ import annotations

import json
import os
import re
import ssl
import subprocess
from pathlib import Path

import httpx
import yaml
from prometheus_client import REGISTRY, CollectorRegistry

from gpushare.agent.node.inventory import declared_gpus
from gpushare.agent.runtime.telemetry import AgentMetrics
from gpushare.apiserver.telemetry.metrics import Metrics
from gpushare.cli.compose import api_server
from gpushare.controllers.scheduling.scheduler_metrics import SchedulerMetrics
from gpushare.tools import find_tool

ROOT = Path(__file__).resolve().parents[2] / "src/gpushare/deploy/monitoring"
NAME = re.compile(r"\b((?:queue|gpushare|apiserver|task|e2e|action)_[a-z0-9_]+)\b")
SUFFIXES = ("_bucket", "_count", "_sum", "_total")


def _exported() -> set[str]:
    names: set[str] = set()
    import gpushare.tenancy.metrics  # noqa: F401  (its figures live in the default registry)

    registries = [SchedulerMetrics().registry, REGISTRY,
                  AgentMetrics("n", declared_gpus("n", "1xL40S"), "none").registry,
                  Metrics(lambda: 0, lambda: 0, lambda: 0, lambda: 0, lambda: 0).registry]
    for registry in registries:
        for family in registry.collect():
            names.add(family.name)
            names.update(s.name for s in family.samples)
    # the union the API server adds, and the controllers' process gauges (manager.py)
    names |= {"gpushare_component_push_age_seconds", "gpushare_controller_events_written",
              "gpushare_queue_status_writes", "gpushare_scheduler_pending_deltas"}
    return names


def _with_suffixes(names: set[str]) -> set[str]:
    return names | {n + s for n in names for s in SUFFIXES}


def test_every_grafana_expression_uses_exported_metrics():
    dash = json.loads((ROOT / "grafana-dashboard.json").read_text())
    exported = _with_suffixes(_exported())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs.append(dash["templating"]["list"][0]["query"]["query"])
    assert len(exprs) > 15
    # metric names only: label matchers, `by (...)` and label_values' label left out
    bare = [re.sub(r"\{[^}]*\}|by \([^)]*\)|,\s*queue_name\)", "", e) for e in exprs]
    assert not any("tenant_name" in e for e in bare)
    used = {m for e in bare for m in NAME.findall(e)}
    assert used - exported == set(), sorted(used - exported)
    for must in ("queue_allocated_gpus", "queue_fair_share_gpu", "queue_deserved_gpus",
                 "gpushare_scheduler_decisions_total", "gpushare_scheduler_pending_jobs",
                 "gpushare_gpu_slots_held", "gpushare_watchdog_kills_total",
                 "gpushare_tenant_pods", "gpushare_tenant_sync_seconds_bucket"):
        assert must in used
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


def test_scrape_config_uses_a_bearer_token_over_https():
    cfg = yaml.safe_load((ROOT / "prometheus.yml").read_text())
    job = next(j for j in cfg["scrape_configs"] if j["job_name"] == "gpushare")
    assert job["scheme"] == "https" and job["metrics_path"] == "/metrics"
    assert job["authorization"]["type"] == "Bearer"
    assert job["authorization"]["credentials_file"]
    assert job["tls_config"]["ca_file"]


def test_the_shipped_rbac_lets_prometheus_scrape_and_nothing_more(tmp_path):
    with api_server(tmp_path / "api") as server:
        server.tokens.add("prom-token", "prometheus", [])
        env = {**os.environ, "KUBECONFIG": str(tmp_path / "api/admin.kubeconfig")}
        for args in (["create", "namespace", "monitoring"],
                     ["apply", "-f", str(ROOT / "rbac.yaml")]):
            done = subprocess.run([find_tool("kubectl") or "kubectl", *args], env=env,
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
        assert server.ca_path is not None
        tls = ssl.create_default_context(cafile=str(server.ca_path))
        with httpx.Client(base_url=server.url, verify=tls,
                          headers={"Authorization": "Bearer prom-token"}) as prom:
            r = prom.get("/metrics")
            assert r.status_code == 200 and "apiserver_request_total" in r.text
            assert prom.get("/api/v1/namespaces/default/pods").status_code == 403
            assert prom.get("/apis/metrics.k8s.io/v1beta1/nodes").status_code == 403


def test_exported_names_are_one_family_each():
    registry = CollectorRegistry()
    SchedulerMetrics(registry)
    names = [f.name for f in registry.collect()]
    assert len(names) == len(set(names))
