"""Backend ``process``: a container is a sandboxed runtime process tree in its own cgroup on this machine.

Start-up is one fork of the backend's zygote (a process that imported the runtime and common
modules once, :mod:`owx.runtimes.zygote`; a kind such as ``python:tensorflow`` has its own that
also imported the kind's libraries), or, without it, an interpreter started for this one
container (``zygote --once``): both run the same code, :mod:`owx.runtimes.container_init`, as pid
1 of a new pid namespace, which joins the cgroup (created and limited first), builds the sandbox
(:mod:`owx.runtimes.confine`) and waits to learn its tenant (:meth:`ProcessContainer.assign`:
at once for a new container, when claimed for a stem cell) before it becomes that tenant and
serves as the runtime. The runtime serves on a Unix socket the backend made in a root-only directory and
handed over already listening, so ``/init`` can be sent at once, and no sandbox can reach any
runtime's socket. No polling anywhere.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path

from owx.common.cgroups import CgroupError
from owx.platform.embedded.backends.sandbox_layout import SandboxLayout
from owx.platform.embedded.backends.zygote_client import Zygote, ZygoteError, Zygotes
from owx.platform.embedded.container import Backend, Container, ContainerRequest
from owx.platform.embedded.identities import Identities
from owx.platform.embedded.instance import Instance
from owx.platform.embedded.port_binds import PortBindFilter
from owx.platform.embedded.proxy import ProxyClient
from owx.platform.embedded.watcher import FdWatcher
from owx.platform.settings import PlatformSettings
from owx.platform.types import PYTHON_KINDS
from owx.runtimes import fd_messages, kernel
from owx.runtimes.confine import WRITABLE, ContainerPlan

log = logging.getLogger(__name__)

ZYGOTE_MODULE = "owx.runtimes.zygote"
PACKAGE_DIR = Path(__file__).resolve().parents[3]  # owx/
ZYGOTE_NOTICE_WAIT_S = 0.2  # a forked container that exited: the zygote reaps it and reports within ms
ZYGOTE_REAP_WAIT_S = 5.0


class ProcessBackend(Backend):
    """Runs Python runtimes as sandboxed processes in cgroups; kinds ``python:*`` only."""

    name = "process"

    def __init__(self, settings: PlatformSettings, instance: Instance, identities: Identities,
                 watcher: FdWatcher) -> None:
        super().__init__(watcher)
        if os.geteuid() != 0:
            raise PermissionError("the process backend builds sandboxes and cgroups: run owx as root")
        self.launch = prepare_launch(settings.runtime_python)
        self.sockets = instance.sockets
        self.identities = identities
        self.layout = SandboxLayout.build(list(self.launch.paths), instance.state_dir, identities.directories,
                                          settings.sandbox)
        self.port_binds = PortBindFilter.load_or_warn()
        make = partial(Zygote, self.launch.python, runtime_env(self.launch.pythonpath))
        self.zygotes = Zygotes(make, settings.zygote_preload, settings.zygote_kind_preload) if settings.zygote else None

    @property
    def zygote(self) -> Zygote | None:
        """The common zygote (None: containers start an interpreter each)."""
        return self.zygotes.common if self.zygotes is not None else None

    def create(self, request: ContainerRequest) -> Container:
        if request.kind not in PYTHON_KINDS:
            raise ValueError(f"backend 'process' runs kinds {', '.join(PYTHON_KINDS)}, not {request.kind!r}")
        container = ProcessContainer(f"owx-{secrets.token_hex(6)}", request, self.watcher, self.notifier, self.exits)
        container.start(self)
        return container

    def close(self) -> None:
        super().close()
        if self.zygotes is not None:
            self.zygotes.close()
        if self.port_binds is not None:
            self.port_binds.close()


class ProcessContainer(Container):
    backend_name = "process"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.uid: int | None = None
        self._backend: ProcessBackend | None = None
        self._socket: Path | None = None
        self._control: socket.socket | None = None  # to the container's pid 1; closing it ends the container
        self._process: subprocess.Popen[bytes] | None = None  # the exec path's one-shot zygote
        self._outputs: dict[str, int] = {}  # stream -> the read end of its pipe
        self._zygote: Zygote | None = None  # the forked container's parent, when it has one
        self._code: int | None = None

    def start(self, backend: ProcessBackend) -> None:
        """Create the limited cgroup and start the container inside it (forked by the zygote if there is one)."""
        self._backend = backend
        self._make_cgroup()
        self.uid = backend.identities.take_uid()
        self._socket = backend.sockets / f"{self.id}.sock"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        try:
            listener.bind(str(self._socket))
            listener.listen(128)
            plan = backend.layout.plan(self.id, self.cgroup, self.uid, runtime_env(backend.launch.pythonpath))
            fds = [listener.fileno(), out_w, err_w, theirs.fileno()]
            pid = self._fork(backend.zygotes.for_kind(self.request.kind) if backend.zygotes else None, plan, fds)
            if pid is None:
                self._process = subprocess.Popen(
                    backend.launch.once_command(plan, fds), pass_fds=fds, stdin=subprocess.DEVNULL,
                    stdout=out_w, stderr=err_w, env=runtime_env(backend.launch.pythonpath), cwd="/",
                    start_new_session=True)
                pid = self._process.pid
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            self._release()
            raise
        finally:
            for closable in (listener, theirs):
                closable.close()
            os.close(out_w)
            os.close(err_w)
        self.proxy = ProxyClient.unix(str(self._socket))
        for fd, stream in ((out_r, "stdout"), (err_r, "stderr")):
            os.set_blocking(fd, False)
            self._outputs[stream] = fd
            self._watcher.watch_stream(fd, partial(self._feed, fd, stream), lambda: self.tenant)
        self._watch(pid)

    def _feed(self, fd: int, stream: str, chunk: bytes) -> bool:
        held = self.logs.feed(stream, chunk)
        if not chunk:
            self._outputs.pop(stream, None)
            os.close(fd)
        return held

    def drain_output(self) -> None:
        for fd in list(self._outputs.values()):
            self._watcher.read_now(fd)  # within the tenant's share of the loop, as the watcher reads

    def assign(self, namespace: str, own_code: bool = True) -> None:
        """Start the runtime for ``namespace``: its gid, and its directory mounted if it has one and
        the code is its own (another namespace's published action would read and fill it)."""
        assert self._backend is not None and self._control is not None
        identities = self._backend.identities
        directory = identities.directory(namespace) if own_code else None
        trees = [kernel.clone_tree(kernel.AT_FDCWD, str(directory))] if directory is not None else []
        try:
            fd_messages.send(self._control, {"gid": identities.gid(namespace),
                                             "directory": str(directory) if directory else None}, trees)
        except OSError as exc:
            log.info("container %s is gone before it was assigned: %s", self.id, exc)
        finally:
            for fd in trees:
                os.close(fd)
        super().assign(namespace, own_code)

    def _fork(self, zygote: Zygote | None, plan: ContainerPlan, fds: list[int]) -> int | None:
        if zygote is None:
            return None
        try:
            pid = zygote.spawn(dataclasses.asdict(plan), fds)
        except ZygoteError as exc:
            log.warning("zygote could not fork %s (%s); starting the interpreter", self.id, exc)
            return None
        self._zygote = zygote
        return pid

    def _make_cgroup(self) -> None:
        limits = self.request.limits
        self.cgroup.create()
        self.cgroup.set_memory_limit(limits.memory_bytes)
        self.cgroup.set_cpu_shares(limits.cpu_shares)
        self.cgroup.set_cpu_quota(limits.cpu_quota_us, limits.cpu_period_us)
        self.cgroup.set_pids_max(limits.pids_max)
        if self._backend.port_binds is not None:
            self._backend.port_binds.apply(self.cgroup)

    def _signal_kill(self) -> None:
        if self._control is not None:
            try:
                self._control.shutdown(socket.SHUT_RDWR)  # pid 1 kills its namespace and ends
            except OSError:
                pass
        self.cgroup.kill_all()
        try:
            if self._process is not None and self._process.poll() is None:
                os.kill(self._process.pid, signal.SIGKILL)
        except (ProcessLookupError, OSError):
            pass

    def _release(self) -> None:
        if self._process is not None:
            self._process.wait()
        elif self._zygote is not None and self._code is None:
            self._code = self._zygote.exit_code(self.pid, ZYGOTE_REAP_WAIT_S)
        try:
            self.cgroup.destroy()
        except CgroupError as exc:
            log.warning("could not remove cgroup of %s: %s", self.id, exc)
        if self._control is not None:
            self._control.close()
        if self._socket is not None:
            self._socket.unlink(missing_ok=True)
        if self.uid is not None and self._backend is not None:
            self._backend.identities.give_back(self.uid)

    def _apply_memory_limit(self, memory_bytes: int) -> None:
        self.cgroup.set_memory_limit(memory_bytes)

    def _exit_code(self) -> int | None:
        if self._process is not None:
            return self._process.poll()
        if self._zygote is not None and self._code is None and self._exited_already():
            self._code = self._zygote.exit_code(self.pid, ZYGOTE_NOTICE_WAIT_S)
        return self._code


def runtime_env(pythonpath: str) -> dict[str, str]:
    """The environment a runtime starts with (its actions add theirs per activation)."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": WRITABLE,
        "TMPDIR": WRITABLE,
        "PYTHONPATH": pythonpath,
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "LANG": "C.UTF-8",
    }


@dataclass(frozen=True, slots=True)
class Launch:
    """How containers start: the interpreter, its module path, and what of the host it needs to see."""

    python: str
    pythonpath: str
    paths: tuple[str, ...]  # its prefixes, its site directories, owx's package directory

    def once_command(self, plan: ContainerPlan, fds: list[int]) -> list[str]:
        # -S skips site's .pth processing (50-100 ms here); site-packages stay importable via PYTHONPATH.
        return [self.python, "-S", "-m", ZYGOTE_MODULE, "--once", json.dumps(dataclasses.asdict(plan)),
                *map(str, fds)]


@lru_cache(maxsize=None)
def prepare_launch(python: str) -> Launch:
    """Find the interpreter's prefixes and site directories (asked once per interpreter) and write owx's bytecode."""
    listing = subprocess.run(
        [python, "-c", "import json, site, sys; print(json.dumps([sys.prefix, sys.base_prefix, "
                       "*site.getsitepackages()]))"],
        capture_output=True, timeout=30, check=True,
    )
    prefixes, site_dirs = json.loads(listing.stdout)[:2], json.loads(listing.stdout)[2:]
    site_dirs = [d for d in site_dirs if os.path.isdir(d)]
    compile_owx(python)
    return Launch(python, os.pathsep.join([str(PACKAGE_DIR.parent), *site_dirs]),
                  tuple([*prefixes, *site_dirs, str(PACKAGE_DIR)]))


def compile_owx(python: str) -> None:
    """Write owx's bytecode for ``python`` once: runtimes never write it (PYTHONDONTWRITEBYTECODE),
    and without it every container start compiles the runtime and checkpoint modules again
    (~0.4 s of CPU per start measured here)."""
    done = subprocess.run([python, "-m", "compileall", "-q", str(PACKAGE_DIR)], capture_output=True, timeout=120)
    if done.returncode != 0:  # a read-only install: containers still start, only slower
        log.warning("could not write owx bytecode for %s: %s", python, done.stdout.decode(errors="replace")[-300:])
