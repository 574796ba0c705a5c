"""The bytes of entity documents (actions, packages, triggers, rules) a namespace may send per minute.

Each such write is parsed, merged, encoded and stored by the gateway's one interpreter, about 10 ms
of its time per megabyte: one tenant overwriting a 12 MB action from four threads in a loop made
every other tenant's calls wait, a warm invoke 0.57 s, a deploy 0.77 s. A namespace has a budget
of ``bytes_per_minute``, spent by each body before it is parsed and refilled evenly over a minute;
a body the budget cannot pay gets a 429 with nothing parsed, so a deploy of a few large actions
passes and a loop of them is held to the rate. When the caller's key is known, the 429 comes as
soon as the request's head is read (:func:`refuse_unpaid`): refused bodies are not even read.
"""

from __future__ import annotations

import re
import threading
import time

from owx.gateway.errors import ApiError
from owx.gateway.http.protocol import EarlyRefusal
from owx.gateway.identity import Authenticator

ENTITY_WRITE = re.compile(rb"/api/v1/namespaces/[^/?]+/(actions|packages|triggers|rules)/")
TOO_MANY_BYTES = ("Too many bytes of entities written in the last minute (count: {count} bytes, "
                  "allowed: {allowed} bytes).")


class WriteBudget:
    """A token bucket of bytes per namespace, ``bytes_per_minute`` deep (0: no budget)."""

    def __init__(self, bytes_per_minute: int) -> None:
        self.bytes_per_minute = bytes_per_minute
        self._left: dict[str, tuple[float, float]] = {}  # namespace -> (bytes left, when counted)
        self._lock = threading.Lock()

    def charge(self, namespace: str, size: int) -> None:
        """Spend ``size`` bytes of ``namespace``'s budget, or raise a 429 (nothing spent)."""
        if (refusal := self._take(namespace, size, spend=True)) is not None:
            raise ApiError(429, refusal)

    def refusal(self, namespace: str, size: int) -> str | None:
        """The 429's message if ``namespace``'s budget cannot pay ``size`` bytes now (nothing spent)."""
        return self._take(namespace, size, spend=False)

    def _take(self, namespace: str, size: int, spend: bool) -> str | None:
        if not self.bytes_per_minute:
            return None
        now = time.monotonic()
        with self._lock:
            left, since = self._left.get(namespace, (float(self.bytes_per_minute), now))
            left = min(float(self.bytes_per_minute), left + (now - since) * self.bytes_per_minute / 60.0)
            if size > left:
                self._left[namespace] = (left, now)
                spent = self.bytes_per_minute - int(left)
                return TOO_MANY_BYTES.format(count=spent + size, allowed=self.bytes_per_minute)
            self._left[namespace] = (left - size if spend else left, now)
            return None


def refuse_unpaid(auth: Authenticator, budget: WriteBudget) -> EarlyRefusal:
    """The server's check of a large request's head: an entity write whose caller (its key cached)
    cannot pay for its body gets the 429 before the body is read; the others go on."""

    def check(method: bytes, target: bytes, authorization: str | None, size: int) -> tuple[int, str] | None:
        if method != b"PUT" or not ENTITY_WRITE.match(target):
            return None
        try:
            identity = auth.identify_cached(authorization)
        except ApiError:
            return None  # the view answers it
        refusal = budget.refusal(identity.namespace, size) if identity is not None else None
        return None if refusal is None else (429, refusal)

    return check
