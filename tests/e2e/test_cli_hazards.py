"""The `gpushare` command's hazards, each as a user meets it: a demo aimed at a directory
whose control plane runs (or that an earlier run used), $KUBECONFIG for every command,
queue names at 80 columns, and `--help` at 80 columns."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpushare.cli.compose import api_server

GPUSHARE = [sys.executable, "-m", "gpushare.cli.main"]


def _run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUSHARE, *args], capture_output=True, text=True, timeout=90,
                          env={**os.environ, "COLUMNS": "80", **(env or {})}, cwd=cwd)


def test_demo_refuses_a_directory_whose_control_plane_runs(tmp_path: Path) -> None:
    server = api_server(tmp_path, "127.0.0.1", 0)
    server.start()
    try:
        (tmp_path / "up.log").write_text("the running control plane's log\n")
        kubeconfig = (tmp_path / "admin.kubeconfig").read_text()
        done = _run("demo", "--data-dir", str(tmp_path), "--gpus", "1xL40S")
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"{tmp_path} is in use by a running control plane" in done.stderr
        assert "gpushare up" not in done.stdout  # nothing was started
        # ... and nothing of the running one was touched
        assert (tmp_path / "admin.kubeconfig").read_text() == kubeconfig
        assert (tmp_path / "up.log").read_text() == "the running control plane's log\n"
    finally:
        server.stop()


def test_demo_says_at_once_why_a_used_directory_will_not_do(tmp_path: Path) -> None:
    api_server(tmp_path, "127.0.0.1", 0).stop()  # an earlier run: its state is there
    done = _run("demo", "--data-dir", str(tmp_path), "--gpus", "1xL40S")
    assert done.returncode == 2
    assert "holds the state of an earlier run" in done.stderr
    assert "choose another --data-dir" in done.stderr


def test_every_command_follows_kubeconfig_env(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = api_server(data, "127.0.0.1", 0)
    server.start()
    try:
        # A kubeconfig that is not DATA_DIR/admin.kubeconfig, named only by $KUBECONFIG.
        elsewhere = tmp_path / "elsewhere.kubeconfig"
        server.write_kubeconfig(elsewhere)
        (data / "admin.kubeconfig").unlink()
        env = {"KUBECONFIG": str(elsewhere), "HOME": str(tmp_path)}
        for args in (["tenant", "list", "--data-dir", str(data)], ["queue", "list"],
                     ["status", "--json"]):
            done = _run(*args, env=env)
            assert done.returncode == 0, (args, done.stdout, done.stderr)
        # A $KUBECONFIG naming a missing file is an error naming it, for all alike.
        missing = {"KUBECONFIG": str(tmp_path / "missing"), "HOME": str(tmp_path)}
        for args in (["tenant", "list", "--data-dir", str(data)], ["queue", "list"]):
            done = _run(*args, env=missing)
            assert done.returncode != 0 and "missing" in done.stderr, args
    finally:
        server.stop()


def test_status_never_truncates_queue_names_at_80_columns() -> None:
    from rich.console import Console

    from gpushare.cli.status import render

    queues = [{"name": name, "depth": depth, "priority": 100, "gpuQuota": 0.5,
               "gpuLimit": -1, "gpuFairShare": 0.5, "gpuAllocated": 0.25,
               "gpuRequested": 1.0}
              for name, depth in (("ml-org-platform", 0), ("team-a", 1), ("team-b", 1))]
    report = {"queues": queues, "gpus": [{
        "node": "gpu-node-with-a-long-name-1", "gpu": 0, "product": "NVIDIA-L40S",
        "slices": [{"queue": "team-a", "portion": 0.25, "pod": "vc-team-a/train-abc"}],
        "free": 0.75, "enforcement": "declared"}], "pending": []}
    console = Console(width=80, record=True, force_terminal=False)
    render(report, console)
    text = console.export_text()
    for name in ("ml-org-platform", "team-a", "team-b", "gpu-node-with-a-long-name-1"):
        assert name in text, text
    assert "…" not in text


@pytest.mark.parametrize("command", [["controllers"], ["agent"], ["queue", "create"],
                                     ["demo"], ["tenant", "create"]])
def test_help_at_80_columns_cuts_nothing_and_shows_no_backticks(command: list[str]) -> None:
    done = _run(*command, "--help")
    assert done.returncode == 0, done.stderr
    assert "…" not in done.stdout and "`" not in done.stdout, done.stdout
    if command == ["controllers"]:
        assert "--leader-elect-resource-namespace" in done.stdout
    if command == ["queue", "create"]:
        assert "gpushare queue create nlp" in done.stdout

