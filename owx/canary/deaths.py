"""Failure detection: container deaths as the platform reports them (pidfd / OOM eventfd).

The platform notices a dead runtime process within a scheduler tick and calls its death
listeners; this module keeps the recent deaths by container id so that a failed run can
learn why and when its container died, and fans them out to Canary's other parts.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from owx.platform.types import ContainerDeath, ContainerInfo

KEEP = 4096
log = logging.getLogger(__name__)


class DeathWatch:
    """The recent container deaths, and subscribers to new ones (a platform ``ContainerListener``)."""

    def __init__(self) -> None:
        self._deaths: OrderedDict[str, ContainerDeath] = OrderedDict()
        self._cond = threading.Condition()
        self._subscribers: list[Callable[[ContainerDeath], None]] = []
        self._fanout = ThreadPoolExecutor(1, thread_name_prefix="owx-canary-deaths")  # keeps the platform's notifier free

    def subscribe(self, callback: Callable[[ContainerDeath], None]) -> None:
        self._subscribers.append(callback)

    def container_started(self, info: ContainerInfo) -> None:
        """A new container is no news for recovery."""

    def container_died(self, death: ContainerDeath) -> None:
        """The platform's notice of a container that died by itself."""
        with self._cond:
            self._deaths[death.container_id] = death
            while len(self._deaths) > KEEP:
                self._deaths.popitem(last=False)
            self._cond.notify_all()
        for callback in self._subscribers:
            try:
                self._fanout.submit(_safe, callback, death)
            except RuntimeError:  # closed: the gateway is shutting down
                return

    def close(self) -> None:
        self._fanout.shutdown(wait=True)

    def wait_for(self, container_id: str, timeout: float) -> ContainerDeath | None:
        """The death of ``container_id``, waiting up to ``timeout`` seconds for its notice."""
        with self._cond:
            self._cond.wait_for(lambda: container_id in self._deaths, timeout)
            return self._deaths.get(container_id)


def _safe(callback: Callable[[ContainerDeath], None], death: ContainerDeath) -> None:
    try:
        callback(death)
    except Exception:
        log.exception("canary death subscriber failed for %s", death.container_id)
