"""A byte budget per namespace in Canary's Redis checkpoint store (one user per namespace).

Redis counts no bytes per user, so owx counts them (:class:`StoreQuota`): it measures every key under
the store's prefix (a SCAN at start and every ``rescan_s``), measures a key again whenever Redis
announces a change to it (keyevent notifications, which owx switches on), adds the sizes up per
namespace (name, value and Redis' own bytes per key), and takes the writes of a namespace's user
away while its keys hold more than the budget (:meth:`RedisTenants.cut_writes`, a mark in the store
that every gateway's grants keep). Its actions still read and delete; their saves fail with the
store's error and they run on. Writes come back once deletions bring it under the budget.

A cut follows the write that crossed the budget within a notification's round trip, so a namespace
overshoots by what it writes in that time, one value at most from a client that waits for each
answer (Redis' ``proto-max-bulk-len`` bounds a value). What clients hold before it is written, the
values they are sending and the commands a ``MULTI`` queues (which ``EXEC`` then writes at once), is
memory no key count sees: owx bounds it for all clients together (Redis' ``maxmemory-clients``, at
most ``client_bytes``), past which Redis closes the clients holding the most. Without notifications
(a Redis that refuses owx ``CONFIG``), the budget is checked at each SCAN only, clients are not
bounded by owx, and a warning says so. The gateway runs
the count in a process of its own at a lower priority (:class:`QuotaProcess`), so a tenant flooding
the store with writes costs the count CPU, not the gateway's.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

from owx.canary.redis_tenants import CONNECT_TIMEOUT_S, RedisTenants, glob_literal, user_name

log = logging.getLogger(__name__)

RESCAN_S = 30.0  # a full count also catches what notifications missed (a subscriber reconnecting)
EVENTS = "E$gxe"  # keyevent channel: string commands (SET, INCRBY), generic ones (DEL), expired, evicted
ALL_EVENTS = "A"  # Redis' alias for every class of event (g$lshzxetd)
SCAN_COUNT = 1000
BATCH = 1000  # changed keys measured in one round trip
RETRY_S = 1.0
NICE = 10  # the count yields the cores to the gateway and the actions
ENV_URL, ENV_BUDGET, ENV_CLIENTS = "OWX_QUOTA_STORE_URL", "OWX_QUOTA_BUDGET_BYTES", "OWX_QUOTA_CLIENT_BYTES"
KEY_OVERHEAD = 64  # Redis' own bytes per key, about: a flood of tiny keys counts too


class StoreQuota:
    """Keeps each namespace of ``tenants``' store within ``budget_bytes`` (values and key names), and
    what all clients hold unwritten within ``client_bytes``."""

    def __init__(self, tenants: RedisTenants, budget_bytes: int, client_bytes: int,
                 rescan_s: float = RESCAN_S) -> None:
        import redis

        self.budget_bytes = budget_bytes
        self.client_bytes = client_bytes
        self._tenants = tenants
        self._rescan_s = rescan_s
        self._errors = (redis.RedisError, OSError)
        self._redis = redis.Redis.from_url(tenants.admin_url, socket_connect_timeout=CONNECT_TIMEOUT_S,
                                           socket_timeout=CONNECT_TIMEOUT_S)
        self._db = int(self._redis.connection_pool.connection_kwargs.get("db", 0))
        self._sizes: dict[bytes, int] = {}
        self._usage: dict[str, int] = {}  # digest -> bytes
        self._cut: set[str] = set()  # the digests whose writes are taken away, as last read or done
        self._counted = threading.Event()  # set once the first SCAN is counted
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="owx-canary-quota", daemon=True)
        self._thread.start()

    def usage(self, namespace: str) -> int:
        """Bytes the namespace's keys held when last measured."""
        return self._usage.get(self._tenants.digest(namespace), 0)

    def wait_counted(self, timeout: float) -> bool:
        """Wait until the keys present at start are counted."""
        return self._counted.wait(timeout)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(CONNECT_TIMEOUT_S + 2.0)
        self._redis.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._follow()
            except self._errors as exc:
                log.warning("checkpoint store budget: counting failed, again in %g s: %s", RETRY_S, exc)
            except Exception:  # noqa: BLE001 - a bug must not end the count: budgets would no longer hold
                log.exception("checkpoint store budget: counting failed, again in %g s", RETRY_S)
            self._stop.wait(RETRY_S)

    def _follow(self) -> None:
        self._bound_clients()
        notified = self._notifications_on()
        pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        try:
            if notified:
                pubsub.psubscribe(f"__keyevent@{self._db}__:*")
            self._rescan()  # after subscribing: a key changed during the SCAN is measured again after it
            next_scan = time.monotonic() + self._rescan_s
            while not self._stop.is_set():
                wait = max(0.0, min(1.0, next_scan - time.monotonic()))
                if notified:
                    self._measure(self._changed_keys(pubsub, wait))
                else:
                    self._stop.wait(wait)
                if time.monotonic() >= next_scan:
                    self._rescan()
                    next_scan = time.monotonic() + self._rescan_s
        finally:
            pubsub.close()

    def _notifications_on(self) -> bool:
        """Switch on the keyevent notifications the count needs (keeping those already on)."""
        try:
            current = str(self._redis.config_get("notify-keyspace-events").get("notify-keyspace-events", ""))
            missing = "" if ALL_EVENTS in current and "E" in current else \
                "".join(flag for flag in EVENTS if flag not in current)
            if missing:
                self._redis.config_set("notify-keyspace-events", current + missing)
            return True
        except self._errors as exc:
            log.warning("checkpoint store budget: Redis refused keyevent notifications (%s); a namespace's "
                        "budget is checked every %g s only", exc, self._rescan_s)
            return False

    def _bound_clients(self) -> None:
        """Bound the memory of all clients together to ``client_bytes`` (Redis' ``maxmemory-clients``),
        unless a tighter bound is set (or one relative to ``maxmemory``, the operator's)."""
        try:
            current = str(self._redis.config_get("maxmemory-clients").get("maxmemory-clients", "0"))
            if not current.endswith("%") and not 0 < int(current) <= self.client_bytes:
                self._redis.config_set("maxmemory-clients", self.client_bytes)
        except self._errors as exc:
            log.warning("checkpoint store budget: Redis refused a bound on its clients' memory (maxmemory-clients, "
                        "Redis 7): a tenant's queued transaction or values in flight are bounded by nothing (%s)", exc)

    def _changed_keys(self, pubsub: Any, wait_s: float) -> set[bytes]:
        """The namespaces' keys named in the notifications of the next ``wait_s`` (a batch at most)."""
        changed: set[bytes] = set()
        message = pubsub.get_message(timeout=wait_s)
        while message is not None and len(changed) < BATCH:
            key = message.get("data")
            if isinstance(key, bytes) and self._tenants.digest_of(key) is not None:
                changed.add(key)
            message = pubsub.get_message(timeout=0.0)
        return changed

    def _rescan(self) -> None:
        """Count every namespace's keys afresh."""
        pattern = glob_literal(self._tenants.base_prefix) + "*"
        sizes: dict[bytes, int] = {}
        page: list[bytes] = []
        for key in self._redis.scan_iter(match=pattern, count=SCAN_COUNT):
            if self._tenants.digest_of(key) is not None:
                page.append(key)
            if len(page) >= BATCH:
                sizes.update(self._sizes_of(page))
                page = []
        sizes.update(self._sizes_of(page))
        self._sizes = {key: size for key, size in sizes.items() if size}
        usage: dict[str, int] = {digest: 0 for digest in self._usage}
        for key, size in self._sizes.items():
            digest = self._tenants.digest_of(key)
            usage[digest] = usage.get(digest, 0) + size
        self._usage = usage
        self._cut = self._tenants.cut_digests()  # what this or another gateway cut
        self._enforce(usage.keys() | self._cut)
        self._counted.set()

    def _measure(self, keys: set[bytes]) -> None:
        touched: set[str] = set()
        for key, size in self._sizes_of(list(keys)).items():
            digest = self._tenants.digest_of(key)
            self._usage[digest] = self._usage.get(digest, 0) + size - self._sizes.pop(key, 0)
            if size:
                self._sizes[key] = size
            touched.add(digest)
        self._enforce(touched)

    def _sizes_of(self, keys: list[bytes]) -> dict[bytes, int]:
        """Each key's bytes (its name, its value and Redis' own; 0 once deleted), in one round trip."""
        if not keys:
            return {}
        pipeline = self._redis.pipeline(transaction=False)
        for key in keys:
            pipeline.strlen(key)
        lengths = pipeline.execute(raise_on_error=False)
        return {key: KEY_OVERHEAD + len(key) + length if isinstance(length, int) and length else 0
                for key, length in zip(keys, lengths)}

    def _enforce(self, digests: Iterable[str]) -> None:
        for digest in digests:
            used = self._usage.get(digest, 0)
            over = used > self.budget_bytes
            if over != (digest in self._cut):
                self._tenants.cut_writes(digest, over)
                (self._cut.add if over else self._cut.discard)(digest)
                if over:
                    log.warning("checkpoint store: the namespace of user %s holds %d bytes, over its budget of %d: "
                                "its writes are refused until it deletes", user_name(digest), used, self.budget_bytes)
                else:
                    log.info("checkpoint store: the namespace of user %s is within its budget again: writes allowed",
                             user_name(digest))


class QuotaProcess:
    """A :class:`StoreQuota` in a process of its own, at a lower CPU priority: a tenant's flood of
    writes makes it count, never the gateway's interpreter wait. It ends with :meth:`close` or when
    the gateway does (its stdin closes)."""

    def __init__(self, tenants: RedisTenants, budget_bytes: int, client_bytes: int) -> None:
        env = {**os.environ, ENV_URL: tenants.store_url, ENV_BUDGET: str(budget_bytes),
               ENV_CLIENTS: str(client_bytes)}  # not argv: ps shows it
        self._process = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE, env=env)

    def close(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(CONNECT_TIMEOUT_S + 3.0)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdin is not None:
            self._process.stdin.close()


def main() -> None:
    """Count until SIGTERM or until the gateway that started this process ends."""
    logging.basicConfig(level=os.environ.get("OWX_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.nice(NICE)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    tenants = RedisTenants(os.environ[ENV_URL])
    quota = StoreQuota(tenants, int(os.environ[ENV_BUDGET]), int(os.environ[ENV_CLIENTS]))
    try:
        sys.stdin.buffer.read()  # until the gateway closes it, or dies
    finally:
        quota.close()
        tenants.close()


if __name__ == "__main__":
    main()
