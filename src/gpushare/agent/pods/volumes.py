"""A pod's volumes: made on the node before its first container starts, mounted at each
container's ``volumeMounts``, kept up to date, unmounted when the pod goes.

The pod directory plays the container's root (as for ``workingDir``): a volume mounted at
``/data`` is mounted, on the host, at ``<pod dir>/data``, which the sandbox shows the
container at the same path as the rest of its directory. Each volume's own files live in
``<pod dir>/.gpushare/volumes/<name>`` (hidden from the pod) and are bind-mounted from there,
read-only where ``readOnly`` says so, a ``subPath`` of them where it is given.

* ``emptyDir``: a directory (mode 0777, as a kubelet makes it) on the node's disk, or a
  tmpfs for ``medium: Memory`` (its size ``sizeLimit``, else half the node's memory, as
  tmpfs defaults; the kernel charges what the pod writes to the pod's memory cgroup);
* ``configMap``, ``secret``, ``downwardAPI``, ``projected``: a tmpfs holding the files as a
  kubelet lays them out: the data in a ``..<timestamp>`` directory, ``..data`` a symbolic
  link to it, each file a link through ``..data``; an update writes a new directory and
  swaps ``..data`` with one rename, so a reader sees the old set or the new one, never a
  mix. ``items`` (key → path, mode), ``defaultMode`` (0644), ``optional``; the files belong
  to the pod's user. ``projected`` sources may include ``serviceAccountToken`` (a bound
  token for its ``audience`` and ``expirationSeconds``, through the TokenRequest API);
* ``hostPath``: the host's path, for pods that are not a tenant's (a tenant's is refused);
* anything else (``persistentVolumeClaim`` included: no volume plug-in runs here) cannot be
  provided: the pod stays ``ContainerCreating`` with the kubelet's ``FailedMount`` event.

The admission-made ``kube-api-access-*`` volume is the sandbox's own business (sandbox.py).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from gpushare.agent.pods.podspec import PodSpecError, ValueSource, field_value
from gpushare.api import quantity
from gpushare.api.objects import Meta
from gpushare.api.quantity import QuantityError

META_DIR = ".gpushare"
VOLUMES_DIR = "volumes"
DEFAULT_MODE = 0o644
ACCESS_PREFIX = "kube-api-access-"
DATA_LINK = "..data"
TENANT_LABEL = "tenancy.gpushare.io/tenant"

TokenSource = Callable[[Mapping[str, Any], str, int], str]  # (pod, audience, seconds)


class VolumeError(RuntimeError):
    """A volume cannot be provided; the message is the kubelet's ``FailedMount`` text."""


def _failed(volume: str, why: str) -> VolumeError:
    return VolumeError(f'MountVolume.SetUp failed for volume "{volume}" : {why}')


@dataclass(frozen=True, slots=True)
class Owner:
    uid: int
    gid: int


def _tool(name: str) -> str:
    return shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin") or name


def _run(*argv: str, fds: tuple[int, ...] = ()) -> None:
    done = subprocess.run([_tool(argv[0]), *argv[1:]], capture_output=True, text=True,
                          timeout=30, check=False, pass_fds=fds)
    if done.returncode != 0:
        raise OSError(done.stderr.strip() or f"{argv[0]} exited {done.returncode}")


def mounts_under(path: Path) -> list[str]:
    """Mount points at or under `path` (this process's mount namespace), deepest first."""
    root = str(path)
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].encode().decode("unicode_escape")
            if point == root or point.startswith(root + "/"):
                found.append(point)
    return sorted(set(found), key=lambda p: (-p.count("/"), p))


def unmount_all(path: Path) -> list[str]:
    """Detach every mount at or under `path` (before the pod directory is removed: a
    removal through a bind mount would delete the files it shows)."""
    points = mounts_under(path)
    for point in points:
        with contextlib.suppress(OSError):
            _run("umount", "-l", point)
    return points


def _is_mount(path: Path) -> bool:
    return str(path) in mounts_under(path)


def open_beneath(root: Path, rel: PurePosixPath, make: str | None = None) -> int:
    """An ``O_PATH`` descriptor of `root`/`rel` reached without following any symbolic
    link below `root` (a pod writes in its directory and its volumes: a link it planted
    must not send a mount, or a directory the agent makes as root, outside them). With
    `make` ("dir" or "file") missing components are created on the way."""
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(root, flags | os.O_DIRECTORY)
    parts = [p for p in rel.parts if p not in ("", ".", "/")]
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            try:
                nxt = os.open(part, flags | (0 if last else os.O_DIRECTORY), dir_fd=fd)
            except FileNotFoundError:
                if make is None:
                    raise
                if last and make == "file":
                    os.close(os.open(part, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW,
                                     0o644, dir_fd=fd))
                else:
                    os.mkdir(part, 0o755, dir_fd=fd)
                nxt = os.open(part, flags | (0 if last else os.O_DIRECTORY), dir_fd=fd)
            os.close(fd)
            fd = nxt
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            raise OSError(errno.ELOOP, f"{root / rel} is a symbolic link")
        return fd
    except BaseException:
        os.close(fd)
        raise


def _relative(raw: str, field: str) -> PurePosixPath:
    parts = [p for p in PurePosixPath(raw).parts if p not in ("/", ".")]
    if ".." in parts:
        raise PodSpecError(f"{field}: {raw!r} must not contain '..'")
    return PurePosixPath(*parts) if parts else PurePosixPath(".")


def _mode(raw: object, field: str) -> int:
    if raw is None:
        return DEFAULT_MODE
    if not isinstance(raw, int) or not 0 <= raw <= 0o777:
        raise PodSpecError(f"{field}: {raw!r} must be a file mode between 0 and 0777")
    return raw


# --- file sets (configMap, secret, downwardAPI, projected) ---------------------------------

FileSet = dict[str, tuple[bytes, int]]  # relative path → (content, mode)


def _keyed(name: str, kind: str, source: Mapping[str, Any], data: Mapping[str, str] | None,
           field: str, into: FileSet, mode_default: int) -> None:
    if data is None:
        if source.get("optional"):
            return
        raise _failed(name, f'{kind} "{source.get("name")}" not found')
    items = source.get("items")
    if not items:
        for key, value in data.items():
            into[key] = (value.encode(), mode_default)
        return
    for j, item in enumerate(items):
        key = str(item.get("key") or "")
        if key not in data:
            if source.get("optional"):
                continue
            raise _failed(name, f'configmap references non-existent config key: {key}'
                          if kind == "configmap" else
                          f'references non-existent secret key: {key}')
        path = str(_relative(str(item.get("path") or key), f"{field}.items[{j}].path"))
        into[path] = (data[key].encode(), _mode(item.get("mode", mode_default),
                                                f"{field}.items[{j}].mode"))


def _downward(pod: Mapping[str, Any], name: str, source: Mapping[str, Any], field: str,
              into: FileSet, mode_default: int) -> None:
    for j, item in enumerate(source.get("items") or []):
        path = str(_relative(str(item.get("path") or ""), f"{field}.items[{j}].path"))
        if item.get("fieldRef"):
            value = field_value(pod, str(item["fieldRef"].get("fieldPath") or ""),
                                f"{field}.items[{j}].fieldRef.fieldPath")
        elif item.get("resourceFieldRef"):
            value = _resource_value(pod, item["resourceFieldRef"],
                                    f"{field}.items[{j}].resourceFieldRef")
        else:
            raise _failed(name, f"{field}.items[{j}]: needs fieldRef or resourceFieldRef")
        into[path] = (value.encode(), _mode(item.get("mode", mode_default),
                                            f"{field}.items[{j}].mode"))


def _resource_value(pod: Mapping[str, Any], ref: Mapping[str, Any], field: str) -> str:
    wanted = str(ref.get("containerName") or "")
    containers = (pod.get("spec") or {}).get("containers") or []
    container = next((c for c in containers if c.get("name") == wanted),
                     containers[0] if containers and not wanted else None)
    if container is None:
        raise PodSpecError(f"{field}.containerName: no container {wanted!r}")
    kind, _, res = str(ref.get("resource") or "").partition(".")
    raw = ((container.get("resources") or {}).get(kind) or {}).get(res)
    if raw is None:
        return "0"
    try:
        value = quantity.parse_quantity(str(raw))
        divisor = quantity.parse_quantity(str(ref.get("divisor") or "1"))
    except QuantityError:
        raise PodSpecError(f"{field}: {raw!r} is not a quantity") from None
    return str(-(-value // divisor))


def write_atomic(directory: Path, files: FileSet, owner: Owner | None) -> bool:
    """Lay `files` out as a kubelet's atomic writer does; False when they were already so."""
    current = directory / DATA_LINK
    if current.is_symlink() and _read_set(directory / os.readlink(current)) == files:
        return False
    stamp = directory / (time.strftime("..%Y_%m_%d_%H_%M_%S.") + f"{time.time_ns() % 10**9}")
    stamp.mkdir(mode=0o755)
    for rel, (content, mode) in files.items():
        target = stamp / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        os.chmod(target, mode)
        if owner is not None:
            os.chown(target, owner.uid, owner.gid)
    tmp = directory / "..data_tmp"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    tmp.symlink_to(stamp.name)
    old = os.readlink(current) if current.is_symlink() else None
    tmp.replace(current)
    tops = {PurePosixPath(rel).parts[0] for rel in files}
    for top in tops:
        link = directory / top
        if not link.is_symlink():
            link.symlink_to(f"{DATA_LINK}/{top}")
    for entry in directory.iterdir():  # keys gone since the last set
        if entry.is_symlink() and entry.name != DATA_LINK and entry.name not in tops:
            entry.unlink()
    if old is not None and old != stamp.name:
        shutil.rmtree(directory / old, ignore_errors=True)
    return True


def _read_set(directory: Path) -> FileSet:
    out: FileSet = {}
    with contextlib.suppress(OSError):
        for path in directory.rglob("*"):
            if path.is_file():
                out[str(path.relative_to(directory))] = (path.read_bytes(),
                                                         path.stat().st_mode & 0o777)
    return out


# --- the pod's volumes --------------------------------------------------------------------

TOKEN_REFRESH_AT = 0.8  # of a projected token's lifetime, as the kubelet
DEFAULT_TOKEN_SECONDS = 3600
_FILE_SETS = ("configMap", "secret", "downwardAPI", "projected")


class PodVolumes:
    """The volumes of one pod. `setup` makes and mounts them all (again after an agent
    restart: what is mounted already is left); `refresh` rewrites the file sets whose
    sources changed; `teardown` unmounts everything under the pod directory."""

    def __init__(self, pod: Mapping[str, Any], directory: Path, values: ValueSource,
                 tokens: TokenSource | None = None, owner: Owner | None = None) -> None:
        self.pod = pod
        self.directory = directory
        self.root = directory / META_DIR / VOLUMES_DIR
        self._values = values
        self._tokens = tokens
        self._owner = owner
        self._namespace = Meta.of(pod).namespace or "default"
        self._tenant = TENANT_LABEL in Meta.of(pod).labels
        self.volumes: dict[str, Mapping[str, Any]] = {
            str(v.get("name")): v for v in (pod.get("spec") or {}).get("volumes") or []
            if not str(v.get("name") or "").startswith(ACCESS_PREFIX)}
        self._issued: dict[tuple[str, str], tuple[str, float, int]] = {}

    @property
    def wanted(self) -> bool:
        return bool(self.volumes)

    def source(self, name: str) -> Path:
        return self.root / name

    def empty_dirs(self) -> dict[str, Path]:
        """The disk-backed emptyDir volumes and where their files are (for the storage
        pass; a Memory one counts against the pod's memory instead)."""
        return {name: self.source(name) for name, v in self.volumes.items()
                if isinstance(v.get("emptyDir"), Mapping)
                and v["emptyDir"].get("medium") != "Memory"}

    def setup(self) -> None:
        """Make every volume and mount it where the containers ask; `VolumeError` (the
        kubelet's FailedMount message) when one cannot be provided."""
        if not self.volumes and not self._mounts():
            return
        if os.geteuid() != 0:
            raise VolumeError("MountVolume.SetUp failed: the agent is not root and cannot "
                              "mount volumes")
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)
        made: dict[str, Path] = {}
        name = ""
        try:
            for i, (name, volume) in enumerate(self.volumes.items()):
                made[name] = self._make(name, volume, f"spec.volumes[{i}]")
            for field, mount in self._mounts():
                name = str(mount.get("name") or "")
                self._mount(made, mount, field)
        except OSError as exc:
            raise _failed(name, str(exc)) from exc

    def _mounts(self) -> list[tuple[str, Mapping[str, Any]]]:
        spec = self.pod.get("spec") or {}
        out = []
        for kind in ("initContainers", "containers"):
            for i, container in enumerate(spec.get(kind) or []):
                for j, mount in enumerate(container.get("volumeMounts") or []):
                    if not str(mount.get("name") or "").startswith(ACCESS_PREFIX):
                        out.append((f"spec.{kind}[{i}].volumeMounts[{j}]", mount))
        return out

    def _make(self, name: str, volume: Mapping[str, Any], field: str) -> Path:
        where = self.source(name)
        if isinstance(volume.get("emptyDir"), Mapping):
            return self._empty_dir(name, where, volume["emptyDir"], field)
        for kind in _FILE_SETS:
            if isinstance(volume.get(kind), Mapping):
                files = self._files(name, kind, volume[kind], f"{field}.{kind}", False)
                self._tmpfs(where, "0755", None)
                write_atomic(where, files, self._owner)
                return where
        if isinstance(volume.get("hostPath"), Mapping):
            return self._host_path(name, volume["hostPath"])
        if isinstance(volume.get("persistentVolumeClaim"), Mapping):
            claim = volume["persistentVolumeClaim"].get("claimName")
            raise _failed(name, f'persistentvolumeclaim "{claim}" cannot be provided: this '
                          "node runs no volume plug-in")
        kinds = sorted(k for k in volume if k != "name")
        raise _failed(name, f"unsupported volume type {', '.join(kinds) or '(none)'}")

    def _empty_dir(self, name: str, where: Path, source: Mapping[str, Any], field: str) -> Path:
        where.mkdir(exist_ok=True)
        if source.get("medium") == "Memory":
            size = None
            if source.get("sizeLimit") not in (None, ""):
                try:
                    size = str(quantity.to_int(str(source["sizeLimit"])))
                except (QuantityError, ValueError):
                    raise PodSpecError(f"{field}.emptyDir.sizeLimit: "
                                       f"{source['sizeLimit']!r} is not a quantity") from None
            self._tmpfs(where, "0777", size)
        elif source.get("medium") not in (None, ""):
            raise _failed(name, f"emptyDir medium {source['medium']!r} is not supported")
        os.chmod(where, 0o777)
        return where

    def _tmpfs(self, where: Path, mode: str, size: str | None) -> None:
        where.mkdir(exist_ok=True)
        if _is_mount(where):
            return
        options = f"mode={mode}" + (f",size={size}" if size else "")
        try:
            _run("mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where))
        except OSError as exc:
            raise _failed(where.name, f"mount tmpfs: {exc}") from exc

    def _host_path(self, name: str, source: Mapping[str, Any]) -> Path:
        if self._tenant:
            raise _failed(name, "hostPath volumes are not allowed in a tenant's pod")
        path = Path(str(source.get("path") or ""))
        kind = str(source.get("type") or "")
        if not path.is_absolute():
            raise _failed(name, f"hostPath path {str(path)!r} must be absolute")
        if kind == "DirectoryOrCreate":
            path.mkdir(parents=True, exist_ok=True)
        elif kind == "FileOrCreate" and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        checks = {"Directory": path.is_dir, "File": path.is_file,
                  "Socket": path.is_socket, "": lambda: True,
                  "DirectoryOrCreate": path.is_dir, "FileOrCreate": path.is_file}
        if kind not in checks:
            raise _failed(name, f"hostPath type {kind!r} is not supported")
        if not checks[kind]():
            raise _failed(name, f"hostPath type check failed: {path} is not a "
                          f"{kind or 'path'}")
        return path

    def _mount(self, made: Mapping[str, Path], mount: Mapping[str, Any], field: str) -> None:
        name = str(mount.get("name") or "")
        if name not in made:
            raise _failed(name, f"{field}.name: no volume {name!r} in spec.volumes")
        target_rel = _relative(str(mount.get("mountPath") or ""), f"{field}.mountPath")
        if target_rel == PurePosixPath(".") or target_rel.parts[0] == META_DIR:
            raise PodSpecError(f"{field}.mountPath: {mount.get('mountPath')!r} is not allowed")
        sub = _relative(str(mount.get("subPath") or ""), f"{field}.subPath")
        if _is_mount(self.directory / target_rel):
            return
        volume = self.volumes[name]
        # file sets are read-only to the pod, as a kubelet mounts them
        read_only = bool(mount.get("readOnly")) or any(
            isinstance(volume.get(k), Mapping) for k in _FILE_SETS)
        try:
            source = open_beneath(made[name], sub,
                                  "dir" if isinstance(volume.get("emptyDir"), Mapping) else None)
        except FileNotFoundError:
            raise _failed(name, f"{field}.subPath: {mount.get('subPath')!r} does not "
                          "exist") from None
        except OSError as exc:
            raise _failed(name, f"{field}.subPath: {exc.strerror or exc}") from exc
        try:
            is_dir = stat.S_ISDIR(os.fstat(source).st_mode)
            target = open_beneath(self.directory, target_rel, "dir" if is_dir else "file")
            try:
                _run("mount", "--no-canonicalize", "--bind", f"/proc/self/fd/{source}",
                     f"/proc/self/fd/{target}", fds=(source, target))
            finally:
                os.close(target)
            if read_only:  # the mount's own root now: reached again, never through a link
                target = open_beneath(self.directory, target_rel)
                try:
                    _run("mount", "--no-canonicalize", "-o", "remount,bind,ro",
                         f"/proc/self/fd/{target}", fds=(target,))
                finally:
                    os.close(target)
        except OSError as exc:
            raise _failed(name, f"bind mount at {field}.mountPath: "
                          f"{exc.strerror or exc}") from exc
        finally:
            os.close(source)

    # --- the file sets -----------------------------------------------------------------

    def _files(self, name: str, kind: str, source: Mapping[str, Any], field: str,
               refresh: bool) -> FileSet:
        files: FileSet = {}
        default = _mode(source.get("defaultMode"), f"{field}.defaultMode")
        if kind == "projected":
            for j, part in enumerate(source.get("sources") or []):
                self._projected(name, part, f"{field}.sources[{j}]", files, default, refresh)
            return files
        self._source(name, kind, source, field, files, default)
        return files

    def _source(self, name: str, kind: str, source: Mapping[str, Any], field: str,
                files: FileSet, default: int) -> None:
        if kind == "configMap":
            data = self._values.config_map(self._namespace, str(source.get("name") or ""))
            _keyed(name, "configmap", source, data, field, files, default)
        elif kind == "secret":
            secret = str(source.get("secretName") or source.get("name") or "")
            data = self._values.secret(self._namespace, secret)
            _keyed(name, "secret", {**source, "name": secret}, data, field, files, default)
        elif kind == "downwardAPI":
            _downward(self.pod, name, source, field, files, default)

    def _projected(self, name: str, part: Mapping[str, Any], field: str, files: FileSet,
                   default: int, refresh: bool) -> None:
        for kind in ("configMap", "secret", "downwardAPI"):
            if isinstance(part.get(kind), Mapping):
                self._source(name, kind, part[kind], f"{field}.{kind}", files, default)
                return
        token = part.get("serviceAccountToken")
        if not isinstance(token, Mapping):
            raise _failed(name, f"{field}: unsupported projection {sorted(part)}")
        path = str(_relative(str(token.get("path") or ""), f"{field}.serviceAccountToken.path"))
        audience = str(token.get("audience") or "")
        seconds = int(token.get("expirationSeconds") or DEFAULT_TOKEN_SECONDS)
        issued = self._issued.get((name, path))
        now = time.time()
        if issued is None or not refresh or now - issued[1] >= TOKEN_REFRESH_AT * issued[2]:
            if self._tokens is None:
                raise _failed(name, "no TokenRequest client for serviceAccountToken")
            try:
                value = self._tokens(self.pod, audience, seconds)
            except Exception as exc:
                raise _failed(name, f"failed to fetch token: {exc}") from exc
            issued = (value, now, seconds)
            self._issued[(name, path)] = issued
        files[path] = (issued[0].encode(), _mode(token.get("mode", default), f"{field}.mode"))

    def refresh(self) -> list[str]:
        """Rewrite the file sets whose sources changed (configMaps, Secrets, tokens due);
        the volumes rewritten. A source that is gone now leaves the files as they were."""
        changed = []
        for i, (name, volume) in enumerate(self.volumes.items()):
            for kind in _FILE_SETS:
                if not isinstance(volume.get(kind), Mapping):
                    continue
                try:
                    files = self._files(name, kind, volume[kind], f"spec.volumes[{i}].{kind}",
                                        True)
                except (VolumeError, PodSpecError):
                    continue
                if write_atomic(self.source(name), files, self._owner):
                    changed.append(name)
        return changed

    def teardown(self) -> list[str]:
        """Unmount everything under the pod directory; the mount points detached."""
        return unmount_all(self.directory)
