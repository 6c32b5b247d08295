"""The wheel carries the deploy/ tree: built offline from this checkout, unpacked outside it,
its `gpushare install --dry-run` prints the objects the checkout renders."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

from gpushare.cli.install import DEPLOY, _rank, render

ROOT = Path(__file__).resolve().parents[2]


def test_installed_wheel_dry_run_matches_checkout(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--no-index", "-q", "-w", str(wheels), str(ROOT)],
                   check=True, capture_output=True, text=True, timeout=240)
    (wheel,) = wheels.glob("gpushare-*.whl")
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    shipped = {p.relative_to(DEPLOY) for p in DEPLOY.rglob("*") if p.is_file()}
    unpacked = site / "gpushare" / "deploy"
    assert shipped and shipped == {p.relative_to(unpacked) for p in unpacked.rglob("*")
                                   if p.is_file()}
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    code = ("import gpushare, sys; assert gpushare.__file__.startswith(sys.argv[1]), "
            "gpushare.__file__; from gpushare.cli.main import app; "
            "sys.argv = ['gpushare', 'install', '--dry-run']; app()")
    done = subprocess.run([sys.executable, "-c", code, str(site)], cwd=outside,
                          env={"PYTHONPATH": str(site), "PATH": "/usr/local/bin:/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    printed = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert printed == sorted(render(DEPLOY / "overlays" / "cluster"), key=_rank)


def test_install_image_points_every_gpushare_container_at_the_registry() -> None:
    env_path = "/usr/local/bin:/usr/bin:/bin"
    done = subprocess.run([sys.executable, "-m", "gpushare.cli.main", "install", "--dry-run",
                           "--overlay", "cluster-with-agent",
                           "--image", "registry.example:5000/gpushare:9.9"],
                          capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": env_path})
    assert done.returncode == 0, done.stderr
    images = [c["image"] for d in yaml.safe_load_all(done.stdout) if d
              for c in (((d.get("spec") or {}).get("template") or {}).get("spec")
                        or {}).get("containers", [])]
    assert len(images) == 2 and set(images) == {"registry.example:5000/gpushare:9.9"}
