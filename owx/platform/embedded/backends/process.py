"""Backend ``process``: a container is a runtime process in its own cgroup on this machine.

Start-up is one fork of the backend's zygote (a runtime process that imported the
runtime and common modules once, :mod:`owx.runtimes.zygote`), or a fork/exec of the
interpreter without it: the cgroup is created and limited first, the child joins it
(and drops to the action user) before it serves, and it inherits a socket that is
already listening, so ``/init`` can be sent at once and waits in the accept backlog
until the runtime is up.  No polling anywhere.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path

from owx.common.cgroups import CgroupError, is_v2
from owx.platform.embedded.backends import PYTHON_KINDS
from owx.platform.embedded.container import Backend, Container, ContainerRequest
from owx.platform.embedded.backends.zygote_client import Zygote, ZygoteError
from owx.platform.embedded.proxy import ProxyClient
from owx.platform.settings import PlatformSettings
from owx.runtimes.confine import enter_container

log = logging.getLogger(__name__)

RUNTIME_MODULE = "owx.runtimes.python_action"
PACKAGE_PARENT = str(Path(__file__).resolve().parents[4])  # the directory that holds owx/
ZYGOTE_NOTICE_WAIT_S = 0.2  # a forked runtime that exited: the zygote reaps it and reports within ms
ZYGOTE_REAP_WAIT_S = 5.0


class ProcessBackend(Backend):
    """Runs Python runtimes as processes in cgroups; kinds ``python:*`` only."""

    name = "process"

    def __init__(self, settings: PlatformSettings) -> None:
        super().__init__()
        self.launch = prepare_launch(settings.runtime_python, settings.action_user)
        self.workroot = Path(tempfile.mkdtemp(prefix="owx-local-"))
        self.workroot.chmod(0o711)
        self.zygote = Zygote(self.launch.python, runtime_env(self.launch.pythonpath, self.workroot),
                             settings.zygote_preload) if settings.zygote else None

    def create(self, request: ContainerRequest) -> Container:
        if request.kind not in PYTHON_KINDS:
            raise ValueError(f"backend 'process' runs kinds {', '.join(PYTHON_KINDS)}, not {request.kind!r}")
        container = ProcessContainer(f"owx-{secrets.token_hex(6)}", request, self.watcher, self.notifier)
        container.start(self.launch, self.workroot, self.zygote)
        return container

    def close(self) -> None:
        super().close()
        if self.zygote is not None:
            self.zygote.close()
        shutil.rmtree(self.workroot, ignore_errors=True)


class ProcessContainer(Container):
    backend_name = "process"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.workdir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._zygote: Zygote | None = None  # the forked runtime's parent, when it has one
        self._code: int | None = None

    def start(self, launch: Launch, workroot: Path, zygote: Zygote | None = None) -> None:
        """Create the limited cgroup and start the runtime inside it (forked by ``zygote`` if given)."""
        self._make_cgroup()
        self.workdir = workroot / self.id
        self.workdir.mkdir(mode=0o700)
        if launch.ids is not None:
            os.chown(self.workdir, *launch.ids)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        try:
            listener.bind(("127.0.0.1", 0))
            listener.listen(128)
            pid = self._fork(zygote, launch, [listener.fileno(), out_w, err_w])
            if pid is None:
                self._process = subprocess.Popen(
                    launch.command(listener.fileno()),
                    pass_fds=(listener.fileno(),),
                    stdin=subprocess.DEVNULL,
                    stdout=out_w,
                    stderr=err_w,
                    cwd=self.workdir,
                    env=self._env(launch.pythonpath),
                    start_new_session=True,
                    preexec_fn=partial(enter_container, self._procs_files(), launch.ids),
                )
                pid = self._process.pid
            port = listener.getsockname()[1]
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            self._release()
            raise
        finally:
            listener.close()
            os.close(out_w)
            os.close(err_w)
        self.proxy = ProxyClient("127.0.0.1", port)
        for fd, stream in ((out_r, "stdout"), (err_r, "stderr")):
            os.set_blocking(fd, False)
            self._watcher.watch_stream(fd, _feeder(self, fd, stream))
        self._watch(pid)

    def _fork(self, zygote: Zygote | None, launch: Launch, fds: list[int]) -> int | None:
        if zygote is None:
            return None
        try:
            pid = zygote.spawn([os.fsdecode(p) for p in self._procs_files()], str(self.workdir),
                               self._env(launch.pythonpath), launch.ids, fds)
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

    def _procs_files(self) -> list[bytes]:
        controllers = [""] if is_v2() else ["memory", "cpu", "cpuacct", "pids"]
        return [bytes(self.cgroup.dir(c) / "cgroup.procs") for c in dict.fromkeys(controllers)]

    def _env(self, pythonpath: str) -> dict[str, str]:
        assert self.workdir is not None
        return runtime_env(pythonpath, self.workdir)

    def _signal_kill(self) -> None:
        self.cgroup.kill_all()
        try:
            if self._process is not None and self._process.poll() is None:
                os.kill(self._process.pid, signal.SIGKILL)
            elif self._process is None and self._pidfd is not None:  # forked: the pidfd is safe from pid reuse
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
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
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _apply_memory_limit(self, memory_bytes: int) -> None:
        self.cgroup.set_memory_limit(memory_bytes)

    def _exit_code(self) -> int | None:
        if self._process is not None:
            return self._process.poll()
        if self._zygote is not None and self._code is None and self._exited_already():
            self._code = self._zygote.exit_code(self.pid, ZYGOTE_NOTICE_WAIT_S)
        return self._code


def runtime_env(pythonpath: str, home: Path) -> dict[str, str]:
    """The environment a runtime starts with (its actions add theirs per activation)."""
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(home),
        "TMPDIR": str(home),
        "PYTHONPATH": pythonpath,
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "LANG": "C.UTF-8",
    }


def _feeder(container: Container, fd: int, stream: str):
    def feed(chunk: bytes) -> None:
        container.logs.feed(stream, chunk)
        if not chunk:
            os.close(fd)

    return feed


@dataclass(frozen=True, slots=True)
class Launch:
    """How runtimes start: interpreter, its module path, and the user they run as (None: root)."""

    python: str
    pythonpath: str
    ids: tuple[int, int] | None

    def command(self, fd: int) -> list[str]:
        # -S skips site's .pth processing (50-100 ms here); site-packages stay importable via PYTHONPATH.
        return [self.python, "-S", "-m", RUNTIME_MODULE, "--fd", str(fd)]


@lru_cache(maxsize=None)
def prepare_launch(python: str, user: str) -> Launch:
    """Find the interpreter's site directories and whether ``user`` can run the runtime with them.

    Both are tried for real once per (interpreter, user): an interpreter under /root, for
    example, is out of reach for ``nobody``, and then actions run as root with a warning.
    """
    listing = subprocess.run(
        [python, "-c", "import json, site; print(json.dumps(site.getsitepackages()))"],
        capture_output=True,
        timeout=30,
        check=True,
    )
    site_dirs = [d for d in json.loads(listing.stdout) if os.path.isdir(d)]
    pythonpath = os.pathsep.join([PACKAGE_PARENT, *site_dirs])
    compile_owx(python)
    return Launch(python, pythonpath, _user_ids(user, python, pythonpath))


def compile_owx(python: str) -> None:
    """Write owx's bytecode for ``python`` once: runtimes never write it (PYTHONDONTWRITEBYTECODE),
    and without it every container start compiles the runtime and checkpoint modules again
    (~0.4 s of CPU per start measured here)."""
    done = subprocess.run([python, "-m", "compileall", "-q", str(Path(PACKAGE_PARENT) / "owx")],
                          capture_output=True, timeout=120)
    if done.returncode != 0:  # a read-only install: containers still start, only slower
        log.warning("could not write owx bytecode for %s: %s", python, done.stdout.decode(errors="replace")[-300:])


def _user_ids(user: str, python: str, pythonpath: str) -> tuple[int, int] | None:
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        log.warning("action user %r does not exist; actions run as root", user)
        return None
    try:
        probe = subprocess.run(
            [python, "-S", "-c", f"import {RUNTIME_MODULE}"],
            user=entry.pw_uid,
            group=entry.pw_gid,
            extra_groups=[],
            cwd="/",
            env={"PYTHONPATH": pythonpath, "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            capture_output=True,
            timeout=30,
        )
        failure = probe.stderr.decode(errors="replace").strip().splitlines()[-1:] if probe.returncode else None
    except OSError as exc:
        failure = [str(exc)]
    if failure is not None:
        log.warning("user %r cannot run %s (%s); actions run as root", user, python, (failure or ["?"])[0])
        return None
    return entry.pw_uid, entry.pw_gid
