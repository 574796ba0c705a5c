"""When refused requests go to the upstream again, so that tenants sharing one upstream key share what
it frees fairly.

OpenWhisk throttles per namespace: every owx tenant without an account of its own shares owx's key and
its limits. If each refused activation were sent again on its own clock, a tenant with a hundred
waiting activations would send a hundred times as often as one with a single one, and take nearly
every slot the upstream frees. Instead, the activations waiting on a key are sent again as often as
before all together (each once per interval, which grows from ``poll_s`` to 1 s while they wait), but
that rate is split equally between the tenants that wait: each tenant's waiting activations form one
stream and go one after another. A tenant alone on its key is sent again as often as before. An
activation whose turn would come after its deadline (``retry_s``) goes once more at its deadline, and
then its refusal stands.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from owx.platform.openwhisk.client import backoff


@dataclass
class _Stream:
    since: float  # when the key began refusing this tenant (it has had activations waiting ever since)
    next: float  # when the last of its waiting activations goes again
    waiting: int = 0


class RetryTurns:
    """The refused activations' turns, per (upstream key, tenant); safe from threads and the event loop
    (nothing in it blocks). An activation :meth:`join` s after its first refusal, asks :meth:`wait_s` after
    each, and :meth:`leave` s when it went through or gave up."""

    def __init__(self, poll_s: float) -> None:
        self._poll_s = poll_s
        self._streams: dict[object, dict[str, _Stream]] = {}  # key -> namespace -> its waiting activations
        self._lock = threading.Lock()

    def join(self, key: object, namespace: str) -> None:
        now = time.monotonic()
        with self._lock:
            stream = self._streams.setdefault(key, {}).setdefault(namespace, _Stream(since=now, next=now))
            stream.waiting += 1

    def leave(self, key: object, namespace: str) -> None:
        with self._lock:
            streams = self._streams[key]
            streams[namespace].waiting -= 1
            if not streams[namespace].waiting:
                del streams[namespace]
                if not streams:
                    del self._streams[key]

    def wait_s(self, key: object, namespace: str, deadline: float) -> float | None:
        """Seconds until a waiting activation of ``namespace`` goes to ``key``'s upstream namespace again: its
        turn, or ``deadline`` (monotonic) if that comes first; None once ``deadline`` has passed."""
        now = time.monotonic()
        with self._lock:
            streams = self._streams[key]
            stream = streams[namespace]
            everyone = sum(s.waiting for s in streams.values())
            interval = backoff(self._poll_s, stream.since) * len(streams) / everyone
            turn = max(now, stream.next) + interval
            if turn > deadline:  # one last try at the deadline, outside the turns, then the refusal stands
                return deadline - now if now < deadline else None
            stream.next = turn
            return turn - now
