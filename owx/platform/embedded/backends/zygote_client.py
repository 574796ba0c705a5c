"""The local backend's end of a runtime zygote (:mod:`owx.runtimes.zygote`).

One common zygote per backend, and one per kind that preloads more (:mod:`.process`);
:meth:`Zygote.spawn` returns the pid of a forked container's first
process, and :meth:`Zygote.exit_code` its exit status once the zygote has reaped it.
"""

from __future__ import annotations

import itertools
import logging
import queue
import socket
import subprocess
import threading
import time
from typing import Any, Callable

from owx.runtimes import fd_messages

log = logging.getLogger(__name__)

SPAWN_TIMEOUT_S = 10.0


class ZygoteError(RuntimeError):
    """The zygote could not fork a container (the caller starts one the usual way)."""


class Zygote:
    """A running zygote process and the notices it sends."""

    def __init__(self, python: str, env: dict[str, str], preload: list[str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                [python, "-S", "-m", "owx.runtimes.zygote", str(theirs.fileno()), *preload],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env, cwd="/", start_new_session=True,
            )
        finally:
            theirs.close()
        self.sock = ours
        self.alive = True
        self.ready = threading.Event()  # the preloads are imported: a spawn answers at once
        self._replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self._exits: dict[int, int] = {}
        self._cond = threading.Condition()
        self._request = threading.Lock()
        self._ids = itertools.count(1)
        threading.Thread(target=self._read, name="owx-zygote-reader", daemon=True).start()

    def spawn(self, plan: dict[str, Any], fds: list[int]) -> int:
        """Fork a container from ``plan`` (a ``ContainerPlan``'s fields) with ``fds``; its pid."""
        with self._request:
            if not self.alive:
                raise ZygoteError("the zygote is not running")
            number = next(self._ids)
            deadline = time.monotonic() + SPAWN_TIMEOUT_S
            try:
                fd_messages.send(self.sock, {"id": number, "plan": plan}, fds)
                while (reply := self._replies.get(timeout=max(0.0, deadline - time.monotonic()))).get("id", number) \
                        != number:
                    pass  # the late answer to a request that timed out: that container ends by itself
            except (OSError, queue.Empty) as exc:
                raise ZygoteError(f"no answer from the zygote within {SPAWN_TIMEOUT_S:.0f} s") from exc
        if "pid" not in reply:
            raise ZygoteError(reply.get("error", "the zygote refused"))
        return int(reply["pid"])

    def exit_code(self, pid: int, timeout: float) -> int | None:
        """The exit status of container ``pid`` (waiting up to ``timeout`` for the zygote's notice)."""
        with self._cond:
            self._cond.wait_for(lambda: pid in self._exits or not self.alive, timeout)
            return self._exits.pop(pid, None)

    def close(self) -> None:
        try:  # wakes the reader's recv and tells the zygote to end (a bare close does neither)
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def _read(self) -> None:
        try:
            while (received := fd_messages.receive(self.sock)) is not None:
                message, _ = received
                if message.get("ready"):
                    self.ready.set()
                elif "exited" in message:
                    with self._cond:
                        self._exits[int(message["exited"])] = int(message["code"])
                        self._cond.notify_all()
                else:
                    self._replies.put(message)
        except OSError:
            pass
        with self._cond:
            self.alive = False
            self._cond.notify_all()
        self._replies.put({"error": "the zygote exited"})
        log.info("runtime zygote %d ended", self.process.pid)


COMMON = ""  # the key of the common zygote


class Zygotes:
    """A backend's zygotes: a common one, and one per kind of ``kind_preload`` (the common modules
    and the kind's own: TensorFlow's 5 CPU-seconds of imports paid once, not by every container).

    A kind's zygote starts with the kind's first container and forks it once it is ready; until
    then the common one does (that container imports the rest itself). A dead zygote is replaced
    in the background; meanwhile its kind's containers start another way.
    """

    def __init__(self, start: Callable[[list[str]], Zygote], common: list[str],
                 kind_preload: dict[str, list[str]]) -> None:
        self._start = start
        self._preloads = {COMMON: list(common)} | {kind: [*common, *extra] for kind, extra in kind_preload.items()}
        self._zygotes: dict[str, Zygote] = {COMMON: start(self._preloads[COMMON])}
        self._replacing: set[str] = set()
        self._closed = False
        self._lock = threading.Lock()

    @property
    def common(self) -> Zygote:
        return self._zygotes[COMMON]

    def for_kind(self, kind: str) -> Zygote | None:
        """The zygote to fork a container of ``kind`` from; None: start an interpreter."""
        if kind in self._preloads:
            own = self._live(kind)
            if own is not None and own.ready.is_set():
                return own
        return self._live(COMMON)

    def preloaded(self, kind: str) -> bool:
        """Whether containers of ``kind`` are forked with every module of the kind imported."""
        zygote = self._zygotes.get(kind if kind in self._preloads else COMMON)
        return zygote is not None and zygote.alive and zygote.ready.is_set()

    def _live(self, key: str) -> Zygote | None:
        """``key``'s zygote if it runs (a common one still importing: its spawn waits); a missing
        or dead one is started in the background."""
        with self._lock:
            zygote = self._zygotes.get(key)
            if zygote is not None and zygote.alive:
                return zygote
            if self._closed or key in self._replacing:
                return None
            self._replacing.add(key)
        threading.Thread(target=self._replace, args=(key, zygote), name="owx-zygote-start", daemon=True).start()
        return None

    def _replace(self, key: str, dead: Zygote | None) -> None:
        try:
            if dead is not None:
                dead.close()
            zygote = self._start(self._preloads[key])
            with self._lock:
                closed = self._closed
                if not closed:
                    self._zygotes[key] = zygote
            if closed:
                zygote.close()
        finally:
            with self._lock:
                self._replacing.discard(key)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            zygotes = list(self._zygotes.values())
        for zygote in zygotes:
            zygote.close()
