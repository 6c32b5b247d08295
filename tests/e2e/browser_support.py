"""The browser the dashboard tests drive: the Chromium `make install-test` installs, and a
navigation that survives the host's interfaces changing under it.

Chromium aborts a navigation with `net::ERR_NETWORK_CHANGED` when a network interface
appears or goes while it loads, and every pod the agent starts on its own network adds a
veth pair on the host. A real user presses reload; the tests retry the same way."""

from __future__ import annotations

from playwright.sync_api import Error, Page

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def goto(page: Page, url: str, attempts: int = 5) -> None:
    """`page.goto(url)`, again when only the host's network changed meanwhile."""
    for attempt in range(attempts):
        try:
            page.goto(url)
            return
        except Error as e:
            if "ERR_NETWORK_CHANGED" not in str(e) or attempt == attempts - 1:
                raise
