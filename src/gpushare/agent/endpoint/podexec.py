"""How `kubectl exec` runs a command in a running container: the one place that decides
its command line, environment and working directory."""

from __future__ import annotations

from pathlib import Path

from gpushare.agent.endpoint.streams import ExecTarget
from gpushare.agent.pods.podspec import ContainerPlan
from gpushare.agent.runtime import sandbox as sb
from gpushare.agent.runtime.probes import join_cgroups


def exec_in_pod(pod_directory: Path, plan: ContainerPlan, command: list[str],
                sandbox: sb.SandboxState | None = None, pgid: int | None = None,
                cgroups: tuple[str, ...] = ()) -> ExecTarget:
    """The container's environment and working directory, inside its sandbox (the
    namespaces of its run `pgid`, its network namespace included, as the pod's user) and
    its cgroups."""
    argv, env, cwd = list(command), dict(plan.env), pod_directory / plan.working_dir
    if sandbox is not None and sandbox.mode != sb.NONE and pgid is not None:
        argv, env, where = sb.enter_argv(sandbox, pgid, command, env=plan.env, cwd=str(cwd))
        cwd = Path(where)
    return ExecTarget(argv=join_cgroups(cgroups, argv), env=env, cwd=cwd)
