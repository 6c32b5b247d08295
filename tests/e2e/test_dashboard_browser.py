"""The dashboard in a real browser: Debian's headless Chromium driven by Playwright.

The control plane runs, the three-team pattern is played with kubectl, the page logs in
with the kubeconfig and must show each team's bar at 330m and the GPU drawn as three
slices; then a burst (vision and recsys leave, nlp takes the GPU back) must reach the page
through its watches, without a reload.

``GPUSHARE_SCREENSHOT=docs/dashboard.png`` also writes the screenshot the README shows.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from e2e_support import add_node, wait_for
from playwright.sync_api import expect, sync_playwright

from gpushare.controller_manager import start_controllers

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
EXAMPLES = Path(__file__).resolve().parents[2] / "src/gpushare/examples/three_teams"
TEAMS = ("nlp", "vision", "recsys")


def test_dashboard_shows_the_three_teams_and_follows_a_burst_live(server, kubectl, tmp_path):
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is installed by `make install`"
    running = start_controllers(str(server.kubeconfig), metrics_push_interval=None)
    try:
        _play(server, kubectl, tmp_path)
    finally:
        running.stop()


def _play(server, kubectl, tmp_path):
    add_node(server.kubeconfig, "gpu-node-1", "1xL40S")
    kubectl.run("apply", "-f", str(EXAMPLES / "queues.yaml"))
    kubectl.run("apply", "-f", str(EXAMPLES / "nlp-burst.yaml"))
    kubectl.run("apply", "-f", str(EXAMPLES / "vision.yaml"), "-f", str(EXAMPLES / "recsys.yaml"))
    kubectl.run("apply", "-f", str(EXAMPLES / "virtualclusters.yaml"))
    base = f"https://127.0.0.1:{server.port}"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_context(ignore_https_errors=True,
                                       viewport={"width": 1280, "height": 1000}).new_page()
            navigations: list[str] = []
            page.on("framenavigated", lambda frame: navigations.append(frame.url))
            page.goto(f"{base}/dashboard")
            # Log in by pasting the whole kubeconfig.
            page.fill("#token", Path(server.kubeconfig).read_text())
            page.click("#login-form button[type=submit]")
            expect(page.locator("#board")).to_be_visible()

            for team in TEAMS:
                expect(page.locator(f'[data-queue="{team}"] .allocated-value')).to_have_text(
                    "330m", timeout=60_000)
                expect(page.locator(f'[data-queue="{team}"] .quota-value')).to_have_text(
                    "330m")
            gpu = page.locator('[data-node="gpu-node-1"] [data-gpu="0"] .slice')
            expect(gpu).to_have_count(3, timeout=30_000)
            assert sorted(gpu.nth(i).get_attribute("data-queue") for i in range(3)) == sorted(
                TEAMS)
            assert all(gpu.nth(i).get_attribute("data-portion") == "0.33" for i in range(3))
            hover = gpu.first.get_attribute("data-tip") or ""
            assert "fraction 0.33" in hover and "memory granted" in hover
            # nlp's evicted pods wait, with the scheduler's reason; the timeline says who
            # reclaimed from whom.
            pending = page.locator("#pending tr[data-pod^='default/nlp-train']")
            expect(pending.first).to_be_visible(timeout=30_000)
            expect(pending.first.locator("td.reason")).not_to_have_text("not decided yet",
                                                                        timeout=30_000)
            evict = page.locator("#timeline li[data-reason='Evict']")
            expect(evict).to_have_count(2, timeout=30_000)
            expect(evict.first).to_contain_text("reclaim")
            expect(evict.first).to_contain_text("from queue nlp")
            expect(page.locator("#live")).to_contain_text("live")
            # The tenants: one row per VirtualCluster with its queue.
            for team in TEAMS:
                row = page.locator(f'#tenants tr[data-tenant="{team}"]')
                expect(row).to_contain_text(team, timeout=30_000)
                expect(row).to_contain_text("Ready", timeout=30_000)
            shot = os.environ.get("GPUSHARE_SCREENSHOT")
            page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
            if shot:
                shutil.copy(tmp_path / "dashboard.png", shot)

            # The burst: vision and recsys leave; nlp's waiting pods take the GPU back.
            page.evaluate("window.__sameDocument = true")
            loads = len(navigations)
            kubectl.run("delete", "pod", "vision-train", "recsys-train", "--wait=false")
            expect(page.locator('[data-queue="nlp"] .allocated-value')).to_have_text(
                "990m", timeout=60_000)
            expect(page.locator('[data-queue="vision"] .allocated-value')).to_have_text("0")
            expect(gpu).to_have_count(3, timeout=30_000)
            wait_for(lambda: sorted(gpu.nth(i).get_attribute("data-queue") for i in range(3))
                     == ["nlp"] * 3, what="three nlp slices")
            expect(page.locator("#pending tr[data-pod^='default/nlp-train']")).to_have_count(0)
            assert page.evaluate("window.__sameDocument") is True, "the page was reloaded"
            assert len(navigations) == loads
        finally:
            browser.close()


MONITOR_ROLE = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: queue-watcher}
rules:
- apiGroups: [scheduling.run.ai]
  resources: [queues]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: queue-watcher}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: queue-watcher}
subjects: [{kind: User, name: carol, apiGroup: rbac.authorization.k8s.io}]
"""


def test_a_user_sees_what_their_rbac_allows(server, kubectl, tmp_path):
    """Carol may read queues only: the queue tree is drawn, the rest says RBAC refused."""
    kubectl.run("apply", "-f", str(EXAMPLES / "queues.yaml"))
    kubectl.run("apply", "-f", "-", stdin=MONITOR_ROLE)
    carol = tmp_path / "carol.kubeconfig"
    done = subprocess.run([sys.executable, "-m", "gpushare.cli.main", "kubeconfig",
                           "--data-dir", str(server.data_dir), "--user", "carol",
                           "-o", str(carol)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_context(ignore_https_errors=True).new_page()
            page.goto(f"https://127.0.0.1:{server.port}/dashboard")
            page.fill("#token", carol.read_text())
            page.click("#login-form button[type=submit]")
            expect(page.locator('[data-queue="nlp"] .quota-value')).to_have_text(
                "330m", timeout=30_000)
            expect(page.locator("#nodes .body")).to_contain_text("RBAC does not allow",
                                                                 timeout=30_000)
            expect(page.locator("#pending .body")).to_contain_text("RBAC does not allow")
            expect(page.locator("#timeline .body")).to_contain_text("RBAC does not allow")
            expect(page.locator("[data-node]")).to_have_count(0)
        finally:
            browser.close()


def test_a_bad_token_is_refused_on_the_login_form(server):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_context(ignore_https_errors=True).new_page()
            page.goto(f"https://127.0.0.1:{server.port}/dashboard")
            page.fill("#token", "not-a-token")
            page.click("#login-form button[type=submit]")
            expect(page.locator("#login-error")).to_contain_text("401")
            expect(page.locator("#board")).to_be_hidden()
        finally:
            browser.close()
