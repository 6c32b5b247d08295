"""Screenshots of the dashboard of a running demo, for the docs.

    gpushare demo --keep --data-dir D      # then, while it runs:
    python tools/dashboard_screenshots.py D docs --wait 120

Logs in as the admin (host view) and as tenant ``nlp`` (its view) in headless Chromium,
keeps the host page open ``--wait`` seconds (its history fills meanwhile; change the
cluster then to see it move) and writes ``dashboard.png`` (the whole page),
``dashboard-queues.png``, ``dashboard-history.png``, ``dashboard-pending.png`` and
``dashboard-tenant.png``.
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--wait", type=float, default=60.0)
    parser.add_argument("--tenant", default="nlp")
    args = parser.parse_args()
    admin = (args.data_dir / "admin.kubeconfig").read_text()
    found = re.search(r"server:\s*(\S+)", admin)
    if found is None:
        raise SystemExit(f"{args.data_dir / 'admin.kubeconfig'}: no server")
    server = found.group(1)
    with sync_playwright() as p:
        # A browser each: one browser's pages share six connections to a host, and each
        # page holds five watches open.
        browsers = [p.chromium.launch(executable_path=CHROMIUM,
                                      args=["--headless", "--no-sandbox", "--disable-gpu"])
                    for _ in range(2)]
        tenant, host = (b.new_context(ignore_https_errors=True,
                                      viewport={"width": 1280, "height": 1000}).new_page()
                        for b in browsers)
        tenant.goto(f"{server}/clusters/{args.tenant}/dashboard")
        tenant.fill("#token", (args.data_dir / "tenants" / f"{args.tenant}.kubeconfig").read_text())
        tenant.click("#login-form button[type=submit]")
        host.goto(f"{server}/dashboard")
        host.fill("#token", admin)
        host.click("#login-form button[type=submit]")
        time.sleep(args.wait)
        host.screenshot(path=str(args.out / "dashboard.png"), full_page=True)
        for part in ("queues", "history", "pending"):
            host.locator(f"#{part}").screenshot(path=str(args.out / f"dashboard-{part}.png"))
        tenant.screenshot(path=str(args.out / "dashboard-tenant.png"), full_page=True)
        for browser in browsers:
            browser.close()


if __name__ == "__main__":
    main()
