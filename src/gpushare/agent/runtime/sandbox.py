"""The pod sandbox: each pod's processes run as an unprivileged user of their own, in a
private working directory, unable to read the agent's data, other pods' files or logs.

Isolation modes (the node's is chosen once, at agent start, and shown on the Node):

* ``bwrap`` (the agent is root and bubblewrap works): every container run starts under
  ``bwrap`` with its own mount, PID, IPC and UTS namespaces. The host's file system is seen
  read-only; ``/tmp``, ``/run`` and ``/dev`` are private; the agent's data directory, the
  directory of the agent's kubeconfig (the API server's data directory when they share a
  machine), ``/root`` and ``/home`` are empty; only the pod's own directory is writable (and
  its ``.gpushare`` metadata, where logs live, is hidden). Read-only "image" paths the private
  ``/tmp`` and emptied homes would hide are bound back only when the agent chose them: its
  own installations (virtualenv, interpreter) and the operator's ``--sandbox-read-only``
  paths, unless they overlap a hidden path; never a path from the pod's argv, ``PATH`` or
  ``PYTHONPATH``. Then ``setpriv`` drops to the pod's uid/gid with no capabilities and
  ``no_new_privs``.
* ``setuid`` (the agent is root, no bubblewrap): the command runs as the pod's uid/gid with
  no capabilities, in its 0770 pod directory; nothing is hidden by a mount namespace, so the
  file permissions alone protect: the data dirs are 0700, other pods' directories are
  ``root:<their gid>`` 1770, logs live in the agent's 0700 metadata directory.
* ``none`` (the agent is not root): pods run as the agent's user, as before; the Node says so.

Ids: pod ids come from ``ID_BASE + GPU_IDS`` upwards (200064...), the lowest free one,
recorded in the pod's ``.gpushare/sandbox.json`` (so an agent restart or adoption keeps it)
and freed with the pod directory. The gid is always the pod's own; the uid too, except for
pods that are MPS clients: an MPS control daemon serves one uid at a time, so the clients
of GPU *i* share uid ``ID_BASE + i`` (their gids, directories and other namespaces stay their
own). MPS clients also stay in the host's PID namespace (``host_pid``): the MPS server tells
its clients apart by process id, and in PID namespaces of their own two pods' processes have
the same small ids, so one client's exit tore down the other's context (seen on an H200:
``cudaErrorIllegalAddress`` in the pods that kept running when another ended).

The ServiceAccount token: when the pod has the projected ``kube-api-access-*`` volume the
agent asks the API for a TokenRequest (the pod's ServiceAccount, bound to the pod) and writes
``token``, ``ca.crt`` and ``namespace`` to ``.gpushare/serviceaccount``; with ``bwrap`` that
directory is bound read-only at ``/var/run/secrets/kubernetes.io/serviceaccount``; with
``setuid`` it is copied to ``<pod>/.serviceaccount`` (read-only for the pod's gid) and
``GPUSHARE_SERVICEACCOUNT_DIR`` names it.

For exec (the node server, through ``endpoint.podexec.exec_in_pod``): ``enter_argv(state,
pgid, argv, env, cwd)`` returns ``(argv, env, cwd)`` to hand to ``subprocess``: with
``bwrap`` it ``nsenter``s the mount/PID/IPC/UTS (and network) namespaces of the container's
run (process group `pgid`), with ``setuid`` it enters the pod's network namespace and drops
privileges; both as the pod's user, with the
container's environment. The agent keeps each running pod's ``SandboxState`` beside its
supervisor (and in ``.gpushare/sandbox.json``: `load_state`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from gpushare.agent.runtime.logstore import META_DIR
from gpushare.api.serviceaccounts import TOKEN_MOUNT_PATH

log = logging.getLogger("gpushare.agent")

BWRAP, SETUID, NONE = "bwrap", "setuid", "none"
MODES = (BWRAP, SETUID, NONE)
ID_BASE = 200000
GPU_IDS = 64  # ID_BASE + i: the shared uid of the MPS clients of GPU i
ID_COUNT = 65536
STATE_FILE = "sandbox.json"
SA_DIR = "serviceaccount"  # in the metadata directory
SA_COPY = ".serviceaccount"  # in the pod directory (setuid mode)
SA_ENV = "GPUSHARE_SERVICEACCOUNT_DIR"
SA_MOUNT = TOKEN_MOUNT_PATH
_SYSTEM_RO = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt")
_ALWAYS_HIDDEN = ("/root", "/home")
_GPU_DEVICE_PREFIX = "nvidia"
# the control nodes every CUDA process opens; any other nvidia* node (another GPU's, an
# NVSwitch's, ...) stays out of a pod's /dev
_GPU_CONTROL_NODES = frozenset(
    {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps"})


def _tool(name: str) -> str:
    """A system tool by absolute path (the container's PATH must not choose it)."""
    return shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin") or name


class SandboxError(RuntimeError):
    """The sandbox cannot be set up as asked (the message says what and why)."""


class SandboxNotEntered(SandboxError):
    """The container's run has not entered its sandbox yet: an exec must not start beside
    it in the host's namespaces (it may ask again a moment later)."""


@dataclass(frozen=True, slots=True)
class SandboxPolicy:
    """The node's isolation: the mode and what every pod must not see."""

    mode: str
    reason: str  # why this mode, for the Node and the log
    hidden: tuple[str, ...] = ()  # host paths (directories) emptied in the sandbox
    read_only: tuple[str, ...] = ()  # extra host paths bound read-only (bwrap)
    user_namespace: bool = False  # bwrap by an agent that is not root: pods keep its user

    def describe(self) -> str:
        if self.mode == BWRAP and self.user_namespace:
            return ("bwrap (the agent is not root): the agent's user in user-private user, "
                    "mount, PID, IPC and UTS namespaces; host read-only, data directories "
                    "hidden")
        if self.mode == BWRAP:
            return ("bwrap: per-pod uid/gid, user-private mount, PID, IPC and UTS "
                    "namespaces; host read-only, data directories hidden")
        if self.mode == SETUID:
            return f"setuid: per-pod uid/gid and a private 0770 directory ({self.reason})"
        return f"none: pods run as the agent's user ({self.reason})"


@dataclass(frozen=True, slots=True)
class SandboxState:
    """What the agent records for a pod's sandbox (``.gpushare/sandbox.json``)."""

    mode: str
    uid: int
    gid: int
    root: str  # the pod directory: the container's working root, same path inside
    hostname: str
    hidden: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()
    service_account: bool = False  # a token was written for the pod
    user_namespace: bool = False  # the ids are the agent's own, inside a user namespace
    devices: tuple[str, ...] = field(default=())  # device nodes bound in (GPU pods)
    writable: tuple[str, ...] = field(default=())  # extra rw binds (the MPS pipe directory)
    host_pid: bool = False  # stays in the host's PID namespace (MPS clients: see above)
    netns: str | None = None  # the pod's network namespace (its path), entered first
    files: tuple[tuple[str, str], ...] = field(default=())  # (host file, path) ro binds

    @property
    def meta(self) -> Path:
        return Path(self.root) / META_DIR

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> SandboxState:
        raw = json.loads(text)
        if not isinstance(raw, dict) or raw.get("mode") not in MODES:
            raise ValueError(f"{STATE_FILE}: mode must be one of {', '.join(MODES)}")
        for key in ("hidden", "read_only", "devices", "writable"):
            raw[key] = tuple(raw.get(key) or ())
        raw["files"] = tuple(tuple(pair) for pair in raw.get("files") or ())
        return cls(**raw)


# --- choosing the node's mode ---------------------------------------------------------------

def bwrap_works(binary: str | None = None) -> tuple[bool, str]:
    """Whether bubblewrap is installed and may create namespaces here (a probe run; with a
    user namespace too when the agent is not root)."""
    binary = binary or shutil.which("bwrap")
    if binary is None:
        return False, "bubblewrap (bwrap) is not installed"
    user = [] if os.geteuid() == 0 else ["--unshare-user"]
    try:
        probe = subprocess.run(
            [binary, *user, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
             "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--", "/bin/true"],
            capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bwrap does not run: {exc}"
    if probe.returncode != 0:
        return False, f"bwrap cannot create namespaces: {probe.stderr.decode().strip()}"
    return True, "bwrap works"


def choose_policy(requested: str, hidden: Iterable[Path],
                  read_only: Iterable[Path] = ()) -> SandboxPolicy:
    """The isolation for `requested` (auto, bwrap, setuid, none); `hidden` are the agent's
    data directory and its kubeconfig's directory. A mode that cannot work here is an error;
    `auto` takes the strongest that works."""
    if requested not in ("auto", *MODES):
        raise SandboxError(f"--sandbox: {requested!r} is not one of auto, {', '.join(MODES)}")
    hide = tuple(sorted({str(Path(p).resolve()) for p in hidden}))
    ro = tuple(str(Path(p).resolve()) for p in read_only)
    root = os.geteuid() == 0
    if requested == NONE:
        return SandboxPolicy(NONE, "--sandbox none", hide, ro)
    if not root:
        if requested == SETUID:
            raise SandboxError("--sandbox setuid: the agent must run as root to start pods "
                               "as other users")
        ok, why = bwrap_works()
        if ok:
            return SandboxPolicy(BWRAP, "the agent is not root", hide, ro, user_namespace=True)
        if requested == BWRAP:
            raise SandboxError(f"--sandbox bwrap: {why}")
        return SandboxPolicy(NONE, f"the agent is not root and {why}", hide, ro)
    if requested in ("auto", BWRAP):
        ok, why = bwrap_works()
        if ok:
            return SandboxPolicy(BWRAP, why, hide, ro)
        if requested == BWRAP:
            raise SandboxError(f"--sandbox bwrap: {why}")
        return SandboxPolicy(SETUID, why, hide, ro)
    return SandboxPolicy(SETUID, "--sandbox setuid", hide, ro)


def untraversable(path: Path) -> Path | None:
    """The first directory on the way to `path` that other users cannot cross (no o+x),
    None when they can reach it (the setuid mode needs it for absolute paths)."""
    for directory in [*reversed(path.parents), path]:
        try:
            if not os.stat(directory).st_mode & 0o001:
                return directory
        except OSError:
            return directory
    return None


def mps_base(data_dir: Path) -> Path:
    """Where the MPS daemons' pipe and log directories go: ``<data dir>/mps``, unless a
    parent of the data directory cannot be crossed by other users (a 0700 temporary or home
    directory) while pods run as users of their own: then ``/run/gpushare/<digest of the
    data dir>/mps``, for the pods' users to reach the pipes by their absolute path."""
    default = data_dir / "mps"
    if os.geteuid() != 0 or untraversable(data_dir.parent) is None:
        return default
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:12]
    base = Path("/run/gpushare") / digest
    base.mkdir(parents=True, exist_ok=True)
    for directory in (base.parent, base):
        os.chmod(directory, 0o711)
    return base / "mps"


def open_for_pods(policy: SandboxPolicy, data_dir: Path, pods_root: Path) -> SandboxPolicy:
    """In setuid mode the pods reach their directories through the data directory: make it
    and `pods_root` 0711 (crossable, not listable); when a parent still blocks, the policy's
    reason says that absolute paths into the pod directory (HOME, the token) fail."""
    if policy.mode != SETUID:
        return policy
    pods_root.mkdir(parents=True, exist_ok=True)
    for directory in (data_dir, pods_root):
        os.chmod(directory, 0o711)
    blocker = untraversable(pods_root)
    if blocker is None:
        return policy
    note = (f"{blocker} cannot be crossed by other users: pods reach their directory by "
            "relative paths only")
    log.warning("sandbox: %s", note)
    return SandboxPolicy(policy.mode, f"{policy.reason}; {note}", policy.hidden,
                         policy.read_only)


# --- ids and the recorded state ----------------------------------------------------------------

def load_state(pod_directory: Path) -> SandboxState | None:
    """The sandbox recorded for the pod in `pod_directory`, None if none (or unreadable)."""
    try:
        return SandboxState.from_json((pod_directory / META_DIR / STATE_FILE).read_text())
    except (OSError, ValueError, TypeError):
        return None


def save_state(state: SandboxState) -> None:
    state.meta.mkdir(parents=True, exist_ok=True)
    tmp = state.meta / (STATE_FILE + ".tmp")
    tmp.write_text(state.to_json())
    tmp.replace(state.meta / STATE_FILE)


def ids_in_use(pods_root: Path) -> set[int]:
    """The gids recorded by the pod directories under `pods_root` (``<ns>/<name>``)."""
    used: set[int] = set()
    for recorded in pods_root.glob(f"*/*/{META_DIR}/{STATE_FILE}"):
        state = load_state(recorded.parent.parent)
        if state is not None and state.mode != NONE:
            used.add(state.gid)
    return used


def allocate_id(used: set[int]) -> int:
    for candidate in range(ID_BASE + GPU_IDS, ID_BASE + ID_COUNT):
        if candidate not in used:
            return candidate
    raise SandboxError(f"no free pod id in {ID_BASE + GPU_IDS}..{ID_BASE + ID_COUNT - 1}")


def new_state(policy: SandboxPolicy, pod_directory: Path, hostname: str, used: set[int],
              mps_gpu: int | None = None, devices: Sequence[str] = (),
              writable: Sequence[str] = ()) -> SandboxState:
    """A fresh sandbox for a pod (not yet written: see `prepare`)."""
    if policy.mode == NONE:
        return SandboxState(NONE, os.geteuid(), os.getegid(), str(pod_directory), hostname)
    if policy.user_namespace:
        return SandboxState(policy.mode, os.geteuid(), os.getegid(), str(pod_directory),
                            hostname, policy.hidden, policy.read_only, devices=tuple(devices),
                            writable=tuple(writable), user_namespace=True,
                            host_pid=mps_gpu is not None)
    gid = allocate_id(used)
    uid = ID_BASE + mps_gpu if mps_gpu is not None and 0 <= mps_gpu < GPU_IDS else gid
    return SandboxState(policy.mode, uid, gid, str(pod_directory), hostname, policy.hidden,
                        policy.read_only, devices=tuple(devices), writable=tuple(writable),
                        host_pid=mps_gpu is not None)


def prepare(state: SandboxState, pods_root: Path) -> None:
    """Directories and owners: `pods_root` and the namespace level 0711 (no listing), the pod
    directory ``root:<gid>`` 1770 (the pod writes there, cannot rename what the agent keeps),
    its metadata 0700 root; then record the state."""
    root = Path(state.root)
    root.mkdir(parents=True, exist_ok=True)
    state.meta.mkdir(parents=True, exist_ok=True)
    os.chmod(state.meta, 0o700)
    if state.mode != NONE and not state.user_namespace:
        for level in (pods_root, root.parent):
            os.chmod(level, 0o711)
        os.chown(root, 0, state.gid)
        os.chmod(root, 0o1770)
    save_state(state)


def working_directory(state: SandboxState, cwd: Path) -> None:
    """Create `cwd` (inside the pod directory) owned by the pod, for the pod to write in."""
    root = Path(state.root)
    missing = []
    current = cwd
    while current != root and not current.exists() and root in current.parents:
        missing.append(current)
        current = current.parent
    cwd.mkdir(parents=True, exist_ok=True)
    if state.mode != NONE and not state.user_namespace:
        for made in missing:
            os.chown(made, state.uid, state.gid)
            os.chmod(made, 0o700)


# --- the ServiceAccount token ----------------------------------------------------------------

def write_service_account(state: SandboxState, token: str, ca: str, namespace: str) -> Path:
    """The projected token files, readable by the pod's gid only; returns their directory
    as the pod sees it (the standard path with bwrap)."""
    directories = [state.meta / SA_DIR]
    if state.mode == SETUID:
        directories.append(Path(state.root) / SA_COPY)
    for directory in directories:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in (("token", token), ("ca.crt", ca), ("namespace", namespace)):
            _write_private(directory / name, text, state)
        if _owned_by_root(state):
            os.chown(directory, 0, state.gid)
        os.chmod(directory, 0o750)
    if state.mode == BWRAP:
        return Path(SA_MOUNT)
    return directories[-1]


def _write_private(path: Path, text: str, state: SandboxState) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o640)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    if _owned_by_root(state):
        os.chown(tmp, 0, state.gid)
    os.chmod(tmp, 0o640)
    tmp.replace(path)


def _owned_by_root(state: SandboxState) -> bool:
    """Whether the agent's files for the pod are root's, readable by the pod's gid."""
    return state.mode != NONE and not state.user_namespace


# --- starting and entering ------------------------------------------------------------------

def drop_privileges(state: SandboxState) -> list[str]:
    """``setpriv`` to the pod's ids with no capabilities (nothing when mode is none or the
    pod keeps the agent's user in a user namespace)."""
    if state.mode == NONE or state.user_namespace:
        return []
    return [_tool("setpriv"), f"--reuid={state.uid}", f"--regid={state.gid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]


def sandbox_env(state: SandboxState, env: Mapping[str, str]) -> dict[str, str]:
    """The container's environment adjusted to its user: HOME in the pod directory, USER."""
    out = dict(env)
    if state.mode == NONE:
        if state.service_account:
            out[SA_ENV] = str(state.meta / SA_DIR)
        return out
    user = f"pod-{state.gid}"
    out.update({"HOME": state.root, "USER": user, "LOGNAME": user})
    if "PATH" in out:  # entries the pod's user cannot reach (home directories) are dropped
        out["PATH"] = os.pathsep.join(
            e for e in out["PATH"].split(os.pathsep)
            if e and not any(_overlaps(os.path.abspath(e), h)
                             for h in (*_ALWAYS_HIDDEN, *state.hidden)))
    if state.service_account:
        out[SA_ENV] = SA_MOUNT if state.mode == BWRAP else str(Path(state.root) / SA_COPY)
    if state.mode == BWRAP:
        out["TMPDIR"] = "/tmp"
    else:
        out.pop("TMPDIR", None)
    return out


def launch_argv(state: SandboxState, argv: Sequence[str], env: Mapping[str, str],
                cwd: Path) -> list[str]:
    """The command line that runs `argv` (argv[0] resolved) inside the pod's sandbox (in
    the pod's network namespace first, when it has one)."""
    net = [_tool("nsenter"), f"--net={state.netns}", "--"] if state.netns else []
    if state.mode != BWRAP:
        return [*net, *drop_privileges(state), *argv]
    # an MPS client talks to its daemon through the host's IPC namespace and /dev/shm too,
    # and stays in the host's PID namespace (see `host_pid`)
    ipc = [] if state.writable else ["--unshare-ipc"]
    pid = [] if state.host_pid else ["--unshare-pid"]
    user = ["--unshare-user"] if state.user_namespace else []
    return [*net, _tool("bwrap"), *user, *_bwrap_mounts(state, argv, env), "--chdir", str(cwd),
            *pid, *ipc, "--unshare-uts", "--hostname", state.hostname,
            "--", *drop_privileges(state), *argv]


def _bwrap_mounts(state: SandboxState, argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    args = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    if os.path.isdir("/dev/pts"):  # an exec's terminal is a host pty: it must have a name
        args += ["--dev-bind", "/dev/pts", "/dev/pts"]
    fresh: list[str] = []  # the sandbox's own (tmpfs) directories: parents made in them
    made: set[str] = set()

    def on_fresh(op: str, *paths: str) -> None:
        """`op` with its destination's missing parents made 0755 (bwrap makes them 0700,
        which the pod's user could not cross)."""
        dest = paths[-1]
        parent = os.path.dirname(dest)
        chain = []
        while parent not in ("/", "") and not any(parent == f for f in fresh):
            if any(parent.startswith(f + "/") for f in fresh) and parent not in made:
                chain.append(parent)
            parent = os.path.dirname(parent)
        for directory in reversed(chain):
            args.extend(["--perms", "0755", "--dir", directory])
            made.add(directory)
        args.extend([op, *paths])

    private = ["/tmp", "/run"] + ([] if os.path.islink("/var/run") else ["/var/run"])
    hidden = [p for p in (*_ALWAYS_HIDDEN, *state.hidden) if os.path.isdir(p)]
    for path in [*private, *sorted(hidden, key=len)]:
        on_fresh("--tmpfs", path)
        fresh.append(path)
    for path in image_paths(state.read_only, (*state.hidden, state.root)):
        if state.user_namespace and not _reachable_by(path, state.uid, state.gid):
            continue  # bwrap runs as the agent's own user there: a bind it cannot reach fails
        on_fresh("--ro-bind", path, path)
    on_fresh("--bind", state.root, state.root)
    args += ["--tmpfs", str(state.meta)]
    if state.service_account:
        on_fresh("--ro-bind", str(state.meta / SA_DIR), _host_view(SA_MOUNT))
    for source, target in state.files:  # the pod's /etc/resolv.conf and /etc/hosts
        on_fresh("--ro-bind", source, _host_view(target))
    for device in state.devices:
        if os.path.exists(device):
            args += ["--dev-bind", device, device]
    for path in state.writable:
        if os.path.isdir(path):
            on_fresh("--bind", path, path)
    if state.writable and os.path.isdir("/dev/shm"):
        args += ["--dev-bind", "/dev/shm", "/dev/shm"]
    return args


def _host_view(path: str) -> str:
    """`path` with the symlinks of its existing part resolved (bwrap would resolve them on
    the host, not in the sandbox): /var/run/... is /run/... on most systems."""
    head, rest = path, ""
    while head != "/" and not os.path.exists(head):
        head, name = os.path.split(head)
        rest = os.path.join(name, rest) if rest else name
    return os.path.join(os.path.realpath(head), rest) if rest else os.path.realpath(head)


def agent_image_paths() -> list[str]:
    """The installations the agent itself runs from (its virtualenv, its interpreter's),
    which its pods' Python commands and the GPU hook need: paths the agent chose, never
    ones a pod named."""
    return sorted({p for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                               sys.base_exec_prefix) if p and os.path.isabs(p)})


def image_paths(extra: Iterable[str], hidden: Iterable[str]) -> list[str]:
    """Read-only paths bound back over the private /tmp, /run and the emptied home
    directories: the agent's own installations and the operator's `read_only` ones
    (`extra`). Nothing from a pod's spec or environment (its argv, PATH, PYTHONPATH): a pod
    naming a path under /root or /tmp must not get it bound into its sandbox. A path that
    overlaps a `hidden` one (the data directories) is left out, and so is a home directory
    itself (one inside it is not)."""
    candidates: list[str] = [*agent_image_paths(), *extra]
    covered = [os.path.realpath(h) for h in hidden]
    chosen: list[str] = []
    for raw in candidates:
        path = os.path.realpath(raw)
        if not os.path.exists(path) or path == "/" or not _under_private(path):
            continue
        if any(_overlaps(path, h) for h in covered):
            continue
        if any(h == path or h.startswith(path + "/") for h in _ALWAYS_HIDDEN):
            continue
        if path not in chosen:
            chosen.append(path)
    return sorted(chosen)


def _reachable_by(path: str, uid: int, gid: int) -> bool:
    """Whether the user `uid`/`gid` may walk to `path` and read it (each directory on the
    way searchable, the path itself readable), by the permission bits."""
    parts = [p for p in path.split("/") if p]
    for depth in range(len(parts) + 1):
        current = "/" + "/".join(parts[:depth])
        try:
            st = os.stat(current)
        except OSError:
            return False
        need = 0o1 if depth < len(parts) else 0o4
        if st.st_uid == uid:
            bits = st.st_mode >> 6
        elif st.st_gid == gid:
            bits = st.st_mode >> 3
        else:
            bits = st.st_mode
        if uid != 0 and not bits & need:
            return False
    return True


def _under_private(path: str) -> bool:
    """Whether the sandbox's own mounts (/tmp, /run, hidden homes) would cover `path`."""
    return any(path == p or path.startswith(p + "/")
               for p in ("/tmp", "/run", "/var/run", *_ALWAYS_HIDDEN))


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def gpu_devices(indices: Iterable[int] = (), dev: str = "/dev") -> list[str]:
    """The NVIDIA device nodes a GPU pod gets: ``/dev/nvidia<i>`` of its GPUs `indices`
    only, and the control nodes every CUDA process needs (``nvidiactl``, ``nvidia-uvm``,
    ``nvidia-uvm-tools``, ``nvidia-modeset``, ``nvidia-caps``); the sandbox's /dev has no
    other GPU's node to open, nor any other nvidia node (``nvidia-nvswitch*``, ...)."""
    try:
        names = sorted(os.listdir(dev))
    except OSError:
        return []
    wanted = {f"{_GPU_DEVICE_PREFIX}{i}" for i in indices} | _GPU_CONTROL_NODES
    return [f"{dev}/{n}" for n in names if n in wanted]


def sandboxed_process(pgid: int, inside_only: bool = False) -> int | None:
    """A process of the container run `pgid` to enter: one in namespaces of its own (bwrap),
    else one running as the pod's user (setuid), else the run's first process; with
    `inside_only` only the first kind."""
    try:
        own = os.readlink("/proc/self/ns/mnt")
    except OSError:
        own = ""
    best: tuple[int, int] | None = None  # (rank, pid): 0 own namespaces, 1 pod user, 2 any
    for proc in psutil.process_iter(["pid"]):
        pid = int(proc.info["pid"])
        try:
            if os.getpgid(pid) != pgid or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            inside = os.readlink(f"/proc/{pid}/ns/mnt") != own
            unprivileged = proc.uids().real != 0
            rank = 0 if inside and unprivileged else 1 if unprivileged else 2
        except (OSError, psutil.Error):
            continue
        if inside_only and rank:
            continue
        if best is None or (rank, pid) < best:
            best = (rank, pid)
    return best[1] if best is not None else None


def process_env(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def enter_argv(state: SandboxState, pgid: int, argv: Sequence[str],
               env: Mapping[str, str] | None = None,
               cwd: str | None = None) -> tuple[list[str], dict[str, str], str]:
    """(argv, env, cwd) that run `argv` in the running container whose process group is
    `pgid`, as the pod's user: with `env` (the container's planned environment; else the one
    its process has) and in `cwd` (else its process's). Raises `SandboxError` when no
    process of that run is left, `SandboxNotEntered` while under bwrap none has entered the
    sandbox's namespaces yet (entering the run's first process then would be the host's)."""
    if not argv:
        raise SandboxError("exec: a command is required")
    target = sandboxed_process(pgid, inside_only=state.mode == BWRAP)
    if target is None:
        if state.mode == BWRAP and sandboxed_process(pgid) is not None:
            raise SandboxNotEntered(f"exec: the container (process group {pgid}) has not "
                                    "entered its sandbox yet")
        raise SandboxError(f"exec: the container's processes (group {pgid}) are gone")
    if env is not None:
        env = sandbox_env(state, env)
    else:
        env = process_env(target) or {"PATH": os.defpath}
    workdir = cwd or _process_cwd(target) or state.root
    if state.mode != BWRAP:
        net = [_tool("nsenter"), f"--net={state.netns}", "--"] if state.netns else []
        return [*net, *drop_privileges(state), *argv], dict(env), workdir
    pid = [] if state.host_pid else ["--pid"]
    user = ["--user", "--preserve-credentials"] if state.user_namespace else []
    net = ["--net"] if state.netns else []
    enter = [_tool("nsenter"), f"--target={target}", *user, "--mount", *pid, "--ipc", "--uts",
             *net, "--"]
    return [*enter, *drop_privileges(state), _tool("env"), "-C", workdir, *argv], dict(env), "/"


def _process_cwd(pid: int) -> str | None:
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/{pid}/cwd")
    return None


def describe_state(state: SandboxState) -> str:
    """The pod's sandbox in words (its annotation)."""
    if state.mode == NONE:
        return "none: runs as the agent's user"
    if state.user_namespace:
        return f"{state.mode}: the agent's uid {state.uid} in a user namespace"
    return f"{state.mode}: uid {state.uid} gid {state.gid}"
