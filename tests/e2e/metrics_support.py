"""Scraping the control plane's ``/metrics`` as Prometheus does, and reading the samples."""

from __future__ import annotations

import base64
import ssl
import tempfile
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families


def kubeconfig_parts(kubeconfig: Path) -> tuple[str, str, bytes]:
    """(server URL, bearer token, CA PEM) of a kubeconfig written by the server."""
    cfg = yaml.safe_load(Path(kubeconfig).read_text())
    cluster = cfg["clusters"][0]["cluster"]
    return (cluster["server"], cfg["users"][0]["user"]["token"],
            base64.b64decode(cluster["certificate-authority-data"]))


class Scraper:
    def __init__(self, kubeconfig: Path) -> None:
        self.server, self.token, ca = kubeconfig_parts(kubeconfig)
        handle = tempfile.NamedTemporaryFile("wb", suffix=".crt", delete=False)  # noqa: SIM115
        handle.write(ca)
        handle.close()
        self.ca_path = handle.name
        self.tls = ssl.create_default_context(cafile=self.ca_path)

    def get(self, path: str, token: str | None = "admin") -> httpx.Response:
        headers = {}
        if token == "admin":
            token = self.token
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return httpx.get(self.server + path, headers=headers, verify=self.tls, timeout=30)

    def samples(self, token: str | None = "admin") -> list[tuple[str, dict[str, str], float]]:
        response = self.get("/metrics", token)
        assert response.status_code == 200, response.text
        return [(s.name, dict(s.labels), s.value)
                for family in text_string_to_metric_families(response.text)
                for s in family.samples]


def value(samples: list[tuple[str, dict[str, str], float]], name: str,
          **labels: str) -> float | None:
    """The value of the one sample of ``name`` whose labels include ``labels``."""
    found = [v for n, lab, v in samples
             if n == name and all(lab.get(k) == want for k, want in labels.items())]
    assert len(found) <= 1, f"{name}{labels}: {len(found)} samples"
    return found[0] if found else None


def total(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: Any) -> float:
    return sum(v for n, lab, v in samples
               if n == name and all(lab.get(k) == want for k, want in labels.items()))
