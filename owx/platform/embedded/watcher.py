"""One thread per backend that reads container output and notices exits as they happen.

Everything is file descriptors in one epoll set: output pipes or attach sockets
(readable -> bytes for the log reader), pidfds (readable -> the process exited)
and cgroup OOM eventfds.  No polling loop, so an exit is seen within a scheduler tick.
"""

from __future__ import annotations

import logging
import os
import selectors
import threading
from typing import Callable

log = logging.getLogger(__name__)

ReadCallback = Callable[[bytes], None]  # b"" means end of stream
EventCallback = Callable[[], None]
CHUNK = 65536


class FdWatcher:
    """Dispatches readiness of registered descriptors to callbacks on a daemon thread."""

    def __init__(self, name: str = "owx-fd-watcher") -> None:
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def watch_stream(self, fd: int, on_data: ReadCallback) -> None:
        """Call ``on_data(chunk)`` for everything readable on ``fd``; ``b""`` once at EOF (then unwatched)."""
        self._register(fd, ("stream", on_data))

    def watch_event(self, fd: int, on_event: EventCallback, once: bool = True) -> None:
        """Call ``on_event()`` when ``fd`` becomes readable (a pidfd: the process exited)."""
        self._register(fd, ("once" if once else "event", on_event))

    def unwatch(self, fd: int) -> None:
        with self._lock:
            try:
                self._selector.unregister(fd)
            except (KeyError, ValueError):
                pass

    def close(self) -> None:
        self._closed = True
        os.write(self._wake_w, b"x")
        self._thread.join(timeout=2)
        self._selector.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _register(self, fd: int, data: tuple[str, Callable]) -> None:
        with self._lock:
            self._selector.register(fd, selectors.EVENT_READ, data)
        os.write(self._wake_w, b"x")

    def _loop(self) -> None:
        while not self._closed:
            for key, _ in self._selector.select():
                if key.data is None:
                    try:
                        os.read(self._wake_r, 4096)
                    except BlockingIOError:
                        pass
                    continue
                self._dispatch(key.fd, *key.data)

    def _dispatch(self, fd: int, mode: str, callback: Callable) -> None:
        if mode == "stream":
            try:
                chunk = os.read(fd, CHUNK)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                self.unwatch(fd)
        elif mode == "event":
            try:
                os.read(fd, 4096)  # consume the eventfd count or inotify records
            except OSError:
                pass
        else:
            self.unwatch(fd)
        try:
            if mode == "stream":
                callback(chunk)
            else:
                callback()
        except Exception:  # a faulty callback must not stop log reading for every other container
            log.exception("fd watcher callback failed")
