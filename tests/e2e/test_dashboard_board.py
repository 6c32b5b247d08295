"""The dashboard a platform engineer keeps open, in Debian's headless Chromium: history
kept in the page, a distinct colour per queue, bars against the cluster's GPUs, one
pending row per gang, decisions without the Scheduled noise, who is logged in, and a
tenant's own view of its share of the GPU.

``GPUSHARE_SCREENSHOT_DIR=docs`` also writes what each test saw there (the README's
screenshots are taken from ``gpushare demo --keep`` with ``tools/dashboard_screenshots.py``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from browser_support import ARGS, CHROMIUM, goto
from e2e_support import add_node
from playwright.sync_api import Page, expect, sync_playwright

from gpushare.controller_manager import start_controllers

EXAMPLES = Path(__file__).resolve().parents[2] / "src/gpushare/examples/three_teams"
TEAMS = ("nlp", "vision", "recsys")

# A gang of three 0.5-GPU pods in vision: it can never fit beside the others.
GANG = """
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata: {name: big-gang, namespace: default}
spec: {minMember: 3, queue: vision}
""" + "".join(f"""---
apiVersion: v1
kind: Pod
metadata:
  name: big-gang-{i}
  namespace: default
  labels: {{kai.scheduler/queue: vision}}
  annotations: {{gpu-fraction: "0.5", pod-group-name: big-gang}}
spec:
  schedulerName: gpushare
  containers: [{{name: c, image: python, command: [sleep, "3600"]}}]
""" for i in range(3))


def _shot(page: Page, name: str) -> None:
    where = os.environ.get("GPUSHARE_SCREENSHOT_DIR")
    if where:
        page.screenshot(path=str(Path(where) / name), full_page=True)


def _login(page: Page, url: str, kubeconfig: str) -> None:
    goto(page, url)
    page.fill("#token", kubeconfig)
    page.click("#login-form button[type=submit]")
    expect(page.locator("#board")).to_be_visible()


def _three_teams(server, kubectl) -> None:
    add_node(server.kubeconfig, "gpu-node-1", "1xL40S")
    kubectl.run("apply", "-f", str(EXAMPLES / "queues.yaml"))
    kubectl.run("apply", "-f", str(EXAMPLES / "nlp-burst.yaml"))
    kubectl.run("apply", "-f", str(EXAMPLES / "vision.yaml"), "-f", str(EXAMPLES / "recsys.yaml"))


def test_history_colours_scale_gangs_and_decisions(server, kubectl):
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is installed by `make install`"
    running = start_controllers(str(server.kubeconfig), metrics_push_interval=None)
    try:
        _three_teams(server, kubectl)
        kubectl.run("apply", "-f", "-", stdin=GANG)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
            try:
                page = browser.new_context(ignore_https_errors=True,
                                           viewport={"width": 1280, "height": 1000}).new_page()
                _login(page, f"https://127.0.0.1:{server.port}/dashboard",
                       Path(server.kubeconfig).read_text())
                for team in TEAMS:
                    expect(page.locator(f'[data-queue="{team}"] .allocated-value')).to_have_text(
                        "330m", timeout=60_000)
                _check_who_scale_and_units(page)
                _check_colours(page)
                _check_gang(page)
                _check_decisions(page)
                _check_history(page)
                _check_declared(page)
                _shot(page, "dashboard.png")
            finally:
                browser.close()
    finally:
        running.stop()


def _check_who_scale_and_units(page: Page) -> None:
    expect(page.locator("#who")).to_have_text("logged in as admin", timeout=30_000)
    # Bars are drawn against the cluster's one GPU, not the largest request (ml-org asks 1.65).
    assert page.locator(".queue-table").get_attribute("data-scale") == "1"
    width = page.evaluate("""() => {
        const bar = document.querySelector('[data-queue="nlp"] .bar');
        return bar.querySelector('.allocated').getBoundingClientRect().width
             / bar.getBoundingClientRect().width; }""")
    assert abs(width - 0.33) < 0.01, width
    expect(page.locator("[data-units]")).to_contain_text("340m = 340 milli-GPU")
    # quota under the bar, fair share over it: where both are 330m they do not cover each other
    boxes = page.evaluate("""() => {
        const row = document.querySelector('[data-queue="vision"]');
        const q = row.querySelector('.quota-mark').getBoundingClientRect();
        const f = row.querySelector('.fair-mark').getBoundingClientRect();
        return [q.top, q.bottom, f.top, f.bottom]; }""")
    assert boxes[2] < boxes[0], boxes  # the fair-share marker starts above the quota tick


def _check_colours(page: Page) -> None:
    colours = page.evaluate("""() => Object.fromEntries([...document.querySelectorAll(
        '.queue-table [data-queue]')].map((r) => [r.dataset.queue, r.dataset.colour]))""")
    assert set(colours) >= {"ml-org", *TEAMS}
    assert len(set(colours.values())) == len(colours), colours
    # the slices of a GPU take their queue's colour
    slices = page.locator('[data-node="gpu-node-1"] .slice')
    expect(slices).to_have_count(3, timeout=30_000)
    for i in range(3):
        s = slices.nth(i)
        assert s.get_attribute("data-colour") == colours[s.get_attribute("data-queue") or ""]


def _check_gang(page: Page) -> None:
    gang = page.locator('#pending tr[data-group="default/big-gang"]')
    expect(gang).to_have_count(1, timeout=30_000)
    expect(gang.locator("td.count")).to_have_text("3")
    expect(gang.locator("td.age")).to_have_text(re.compile(r"^\d+[smh]"), timeout=10_000)  # an age
    expect(page.locator("#pending tr[data-group]")).to_have_count(2)  # nlp's Job and the gang
    nlp = page.locator("#pending tr[data-group]:not([data-group='default/big-gang'])")
    expect(nlp.locator("td.count")).to_have_text("2")


def _check_decisions(page: Page) -> None:
    evict = page.locator("#timeline li[data-reason='Evict']")
    expect(evict).to_have_count(2, timeout=30_000)
    expect(evict.first.locator("time")).to_have_text(re.compile(r"^\d+[smhd]( \d+m)? ago$"))
    scheduled = page.locator("#timeline li[data-reason='Scheduled']")
    expect(scheduled).to_have_count(0)
    page.uncheck("#hide-scheduled")
    expect(scheduled.first).to_be_visible(timeout=10_000)
    page.check("#hide-scheduled")
    expect(scheduled).to_have_count(0)


def _check_history(page: Page) -> None:
    lines = page.locator('#history [data-history-queue="nlp"] path[data-series="allocated"]')
    expect(lines).to_have_count(1, timeout=30_000)
    fair = page.locator('#history [data-history-queue="nlp"] path[data-series="fair share"]')
    expect(fair).to_have_count(1)
    assert "H" in (lines.get_attribute("d") or "")  # drawn as steps
    expect(page.locator("#history .waits")).not_to_have_attribute("data-waits", "0")
    # The page keeps a bounded history: an hour of 5-second samples, whatever arrives.
    kept = page.evaluate("""() => {
        const h = window.gpushareDashboard.history;
        const last = h.samples[h.samples.length - 1];
        for (let i = 0; i < 2000; i += 1) h.sample(last.t + (i + 1) * 5000, [], []);
        return [h.samples.length, h.limit]; }""")
    assert kept == [720, 720], kept


def _check_declared(page: Page) -> None:
    expect(page.locator('[data-node="gpu-node-1"] .node-head')).to_contain_text(
        "declared GPUs: use not measured")
    expect(page.locator('[data-node="gpu-node-1"] .gpu-use').first).to_have_text(
        "declared GPUs: use not measured")


def test_tenant_view_shows_the_teams_share_of_the_gpu(server, kubectl, tmp_path):
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is installed by `make install`"
    running = start_controllers(str(server.kubeconfig), metrics_push_interval=None)
    try:
        _three_teams(server, kubectl)
        kubectl.run("apply", "-f", str(EXAMPLES / "virtualclusters.yaml"))
        nlp = tmp_path / "nlp.kubeconfig"
        done = subprocess.run(
            [sys.executable, "-m", "gpushare.cli.main", "tenant", "kubeconfig", "nlp",
             "--data-dir", str(server.data_dir), "--kubeconfig", str(server.kubeconfig),
             "-o", str(nlp)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
            try:
                page = browser.new_context(ignore_https_errors=True,
                                           viewport={"width": 1280, "height": 900}).new_page()
                _login(page, f"https://127.0.0.1:{server.port}/clusters/nlp/dashboard",
                       nlp.read_text())
                expect(page.locator("#who")).to_contain_text("tenant nlp", timeout=30_000)
                node = page.locator('[data-node="gpu-node-1"]')
                expect(node.locator(".node-head")).to_contain_text("1× NVIDIA-L40S",
                                                                   timeout=30_000)
                share = node.locator(".tenant-share")
                expect(share).to_have_count(1)
                expect(share.locator(".gpu-free")).to_have_text(
                    re.compile(r"your share: \d+m of 1 GPU"), timeout=30_000)
                expect(page.locator("#nodes")).not_to_contain_text("no GPUs")
                expect(page.locator("#nodes")).not_to_contain_text("0×")
                expect(page.locator("#tenants")).not_to_contain_text("does not serve")
                expect(page.locator("#tenants")).to_contain_text("inside tenant nlp")
                expect(page.locator('[data-queue="vision"]')).to_have_count(0)
                _shot(page, "dashboard-tenant.png")
            finally:
                browser.close()
    finally:
        running.stop()
