"""`gpushare agent` refuses bad options with a message naming the option, not a traceback."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gpushare.cli.main import app

runner = CliRunner()


def run(*args: str):
    result = runner.invoke(app, ["agent", *args])
    assert "Traceback" not in result.output
    return result


def test_unknown_gpu_product_names_the_option(tmp_path: Path) -> None:
    result = run("--kubeconfig", str(tmp_path / "k"), "--gpus", "2xFOO")
    assert result.exit_code == 2 and "--gpus" in result.output and "FOO" in result.output


def test_bad_enforcement_names_the_option(tmp_path: Path) -> None:
    result = run("--kubeconfig", str(tmp_path / "k"), "--gpus", "1xL40S",
                 "--enforcement", "magic")
    assert result.exit_code == 2 and "--enforcement" in result.output


def test_bad_mps_stop_names_the_option(tmp_path: Path) -> None:
    result = run("--kubeconfig", str(tmp_path / "k"), "--gpus", "1xL40S",
                 "--mps-stop", "kill", "--data-dir", str(tmp_path / "d"))
    assert result.exit_code == 2 and "--mps-stop" in result.output, result.output
    assert "signal, terminate-client" in result.output
    assert not (tmp_path / "d").exists()  # refused before anything was written


def test_the_mps_stop_option_says_why_signals_are_the_default() -> None:
    import typer.main

    command = typer.main.get_command(app).commands["agent"]  # type: ignore[attr-defined]
    [option] = [p for p in command.params if "--mps-stop" in p.opts]
    assert option.default == "signal"
    assert "signal|terminate-client" in option.help and "580.159.04" in option.help


def test_declared_gpus_cannot_claim_mps(tmp_path: Path) -> None:
    result = run("--kubeconfig", str(tmp_path / "k"), "--gpus", "1xL40S", "--enforcement", "mps")
    assert result.exit_code == 2 and "declared" in result.output


def test_unreadable_kubeconfig_names_the_option(tmp_path: Path) -> None:
    result = run("--kubeconfig", str(tmp_path / "missing"), "--gpus", "1xL40S",
                 "--data-dir", str(tmp_path / "d"))
    assert result.exit_code == 2 and "--kubeconfig" in result.output


def test_unreachable_api_is_a_clear_error(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    result = run("--kubeconfig", str(kubeconfig), "--gpus", "1xL40S",
                 "--data-dir", str(tmp_path / "d"))
    assert result.exit_code == 1 and "could not register node" in result.output
