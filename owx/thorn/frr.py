"""Run one FRR instance (zebra, bfdd, bgpd) per namespace; talk to it through vtysh.

Each instance has a private run directory (configs, pid files, zserv socket,
vty sockets, logs) owned by ``frr:frr``, so many instances coexist on a machine.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from owx.common.processes import running
from owx.thorn import netns
from owx.thorn.frr_config import DAEMONS, FrrConfig

FRR_BIN = Path("/usr/lib/frr")


class FrrError(RuntimeError):
    """FRR is missing, did not start, or a daemon is not running."""


class FrrInstance:
    """The FRR daemons of one namespace."""

    def __init__(self, ns: str | None, run_dir: Path, rt_priority: int = 0) -> None:
        self.ns = ns
        self.dir = Path(run_dir)
        self.rt_priority = rt_priority

    def _pidfile(self, daemon: str) -> Path:
        return self.dir / f"{daemon}.pid"

    def pid(self, daemon: str) -> int | None:
        """PID of a running daemon, None when it is not running."""
        try:
            pid = int(self._pidfile(daemon).read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if running(pid) else None

    def dead_daemons(self) -> list[str]:
        return [d for d in DAEMONS if self.pid(d) is None]

    def write(self, config: FrrConfig) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        frr = pwd.getpwnam("frr")
        os.chown(self.dir, frr.pw_uid, frr.pw_gid)
        for daemon, text in config.files().items():
            path = self.dir / f"{daemon}.conf"
            path.write_text(text)
            os.chown(path, frr.pw_uid, frr.pw_gid)

    def start(self, config: FrrConfig, timeout: float = 15) -> None:
        """Write the config and start every daemon that is not running; wait until vtysh answers."""
        if not (FRR_BIN / "zebra").exists():
            raise FrrError(f"FRR is not installed ({FRR_BIN}/zebra missing): apt-get install frr")
        self.write(config)
        for daemon in DAEMONS:
            if self.pid(daemon) is None:
                self._start_daemon(daemon)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.vtysh("show version")
                return
            except FrrError:
                if time.monotonic() > deadline:
                    raise FrrError(f"FRR in {self.ns} did not answer within {timeout}s; see {self.dir}/*.log")
                time.sleep(0.2)

    def _start_daemon(self, daemon: str) -> None:
        d = self.dir
        argv = [str(FRR_BIN / daemon), "-d", "-f", str(d / f"{daemon}.conf"), "-i", str(self._pidfile(daemon)),
                "-z", str(d / "zserv.api"), "--vty_socket", str(d), "-P", "0"]
        if daemon == "bfdd":
            argv += ["--bfdctl", str(d / "bfdd.sock")]
        proc = netns.run(self.ns, argv, check=False)
        if proc.returncode != 0:
            raise FrrError(f"{daemon} in {self.ns} failed to start: {proc.stderr.strip() or proc.stdout.strip()}")
        deadline = time.monotonic() + 10
        while (pid := self.pid(daemon)) is None:
            if time.monotonic() > deadline:
                raise FrrError(f"{daemon} in {self.ns} exited at start; see {d}/{daemon}.log")
            time.sleep(0.05)
        if self.rt_priority and daemon == "bfdd":
            # BFD at 20 ms x 3 tolerates no scheduling delay beyond ~60 ms; on a loaded machine a
            # normal-priority bfdd misses it and sessions flap. Only bfdd: it sleeps between packets,
            # while zebra and bgpd can run long (a real-time bgpd that spins starves the machine).
            for task in Path(f"/proc/{pid}/task").iterdir():
                os.sched_setscheduler(int(task.name), os.SCHED_FIFO, os.sched_param(self.rt_priority))

    def reload(self, config: FrrConfig) -> None:
        """Rewrite the files and apply the configuration to the running daemons (additive, via vtysh -f)."""
        self.write(config)
        path = self.dir / "frr-reload.conf"
        path.write_text(config.integrated())
        self._vtysh(["-f", str(path)])

    def stop(self, timeout: float = 5) -> None:
        """Stop every daemon (TERM, then KILL) and remove the run directory."""
        pids = [p for p in (self.pid(d) for d in reversed(DAEMONS)) if p is not None]
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for pid in pids:
            while running(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)

    def _vtysh(self, args: list[str], timeout: float = 10) -> str:
        argv = ["vtysh", "--vty_socket", str(self.dir), *args]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise FrrError(f"vtysh in {self.ns} timed out") from exc
        if proc.returncode != 0:
            raise FrrError(f"vtysh {' '.join(args)} in {self.ns}: {(proc.stderr or proc.stdout).strip()}")
        return proc.stdout

    def vtysh(self, *commands: str) -> str:
        args: list[str] = []
        for command in commands:
            args += ["-c", command]
        return self._vtysh(args)

    def vtysh_json(self, command: str) -> Any:
        out = self.vtysh(command)
        try:
            return json.loads(out) if out.strip() else {}
        except json.JSONDecodeError as exc:
            raise FrrError(f"vtysh {command!r} in {self.ns} returned non-JSON: {out[:200]!r}") from exc

    def configure(self, *lines: str) -> None:
        """Apply configuration lines to the running daemons."""
        self.vtysh("configure terminal", *lines)
