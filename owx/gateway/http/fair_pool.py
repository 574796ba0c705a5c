"""A thread pool that serves its tenants in turn, so that one namespace's flood of requests does not
queue everyone else's behind it.

A plain thread pool runs work in the order it came: a tenant that keeps 200 slow requests queued
(listing big records, say) makes every other tenant's request wait for all of them. Here each
tenant has a queue of its own and a free thread takes the oldest work of the next tenant in turn,
so another tenant's request waits for at most one piece of work per thread, however much the
flooding tenant queued.

Taking turns is not enough when the work is slow Python (parsing a big body, say): threads share the
interpreter, so a tenant holding every thread makes each of them, and the next request that gets
one, last as long as all of them together. A tenant therefore runs at most ``tenant_threads`` pieces
of work at once, leaving the other threads free for everyone else's next request; tenants that
``share_of`` maps to one name (one namespace's API and web turns, say) share that cap.

Finding the next tenant in turn costs O(log shares), however many tenants queue: the turns are kept
per share, and a share found at its cap leaves the candidates until one of its pieces of work ends.
(Scanning one list of every tenant's turn cost a thread 4.7 ms, holding the pool's lock and the
interpreter, each time it looked for work while 20,000 callers, one turn per address, queued in a
share at its cap.)
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

SHARED = ""  # the tenant of work nobody is known for (unauthenticated callers share one turn)
_Work = tuple[str, Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]  # its tenant's share first


class FairPool(Executor):
    """At most ``threads`` threads (started as work needs them), taking work from the tenants'
    queues in turn, at most ``tenant_threads`` (default: all) at once for the tenants of one
    ``share_of(tenant)`` (default: each tenant its own). ``submit``
    queues under `SHARED`; :meth:`for_tenant` gives the executor that queues under one tenant (for
    ``loop.run_in_executor``)."""

    def __init__(self, threads: int, name: str = "owx-pool", tenant_threads: int | None = None,
                 share_of: Callable[[str], str] = lambda tenant: tenant) -> None:
        if threads < 1 or (tenant_threads is not None and tenant_threads < 1):
            raise ValueError("a pool needs at least one thread, and so does each tenant")
        self._max_threads = threads
        self._tenant_threads = min(threads, tenant_threads or threads)
        self._share_of = share_of
        self._running: dict[str, int] = {}  # share -> its tenants' work running now
        self._name = name
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for work
        self._waiting = 0  # work queued, not yet taken
        self._queues: dict[str, deque[_Work]] = {}
        self._turns = _Turns()  # tenants with queued work, in the order they are served
        self._cond = threading.Condition()
        self._shutdown = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        return self.submit_as(SHARED, fn, *args, **kwargs)

    def submit_as(self, tenant: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """Queue ``fn(*args, **kwargs)`` under ``tenant``; its future. Raises RuntimeError once shut down."""
        future: Future[Any] = Future()
        with self._cond:
            if self._shutdown:
                raise RuntimeError("cannot schedule new work after shutdown")
            share = self._share_of(tenant)
            queue = self._queues.get(tenant)
            if queue is None:
                queue = self._queues[tenant] = deque()
                self._turns.append(share, tenant)
            queue.append((share, future, fn, args, kwargs))
            self._waiting += 1
            if self._waiting > self._idle and len(self._threads) < self._max_threads:
                self._start_thread()  # more work than idle threads to take it
            self._cond.notify()
        return future

    def for_tenant(self, tenant: str) -> Executor:
        """An executor whose ``submit`` queues under ``tenant`` in this pool."""
        return _TenantExecutor(self, tenant)

    def queued(self) -> dict[str, int]:
        """How much work waits, per tenant."""
        with self._cond:
            return {tenant: len(queue) for tenant, queue in self._queues.items()}

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._cond:
            self._shutdown = True
            if cancel_futures:
                for queue in self._queues.values():
                    for _, future, *_ in queue:
                        future.cancel()
                self._queues.clear()
                self._turns.clear()
                self._waiting = 0
            self._cond.notify_all()
            threads = list(self._threads)
        if wait:
            for thread in threads:
                thread.join()

    def _start_thread(self) -> None:
        thread = threading.Thread(target=self._work, name=f"{self._name}_{len(self._threads)}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _next(self) -> _Work | None:
        """The oldest work of the next tenant in turn below its share of threads (waiting for some);
        None once shut down and drained."""
        with self._cond:
            while (tenant := self._turns.pop_runnable(self._below_cap)) is None:
                if self._shutdown and not self._turns:
                    return None
                self._idle += 1
                self._cond.wait()
                self._idle -= 1
            queue = self._queues[tenant]
            work = queue.popleft()
            self._waiting -= 1
            share = work[0]
            self._running[share] = self._running.get(share, 0) + 1
            if queue:
                self._turns.append(queue[0][0], tenant)
            else:
                del self._queues[tenant]
                if self._shutdown and not self._turns:
                    self._cond.notify_all()  # drained: threads waiting for a capped tenant's work may end
            return work

    def _below_cap(self, share: str) -> bool:
        return self._running.get(share, 0) < self._tenant_threads

    def _done(self, share: str) -> None:
        """Count a piece of ``share``'s work as finished (its thread asks for more work next)."""
        with self._cond:
            left = self._running.pop(share) - 1
            if left:
                self._running[share] = left
            self._turns.uncap(share)

    def _work(self) -> None:
        while (work := self._next()) is not None:
            share, future, fn, args, kwargs = work
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # noqa: BLE001 - the caller gets it, as concurrent.futures' pools do
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            self._done(share)
            del work, future, fn, args, kwargs  # nothing of finished work kept alive while this thread waits


class _Turns:
    """The tenants with queued work in the order they are served, kept per share (under the pool's
    lock): the next is the earliest first tenant of the shares below their cap, in O(log shares)."""

    def __init__(self) -> None:
        self._order = itertools.count()
        self._by_share: dict[str, deque[tuple[int, str]]] = {}  # share -> (place in the order, tenant)
        self._heads: list[tuple[int, str]] = []  # heap: (place of its first tenant, share), not known capped
        self._capped: set[str] = set()  # shares found at their cap, out of the heap until `uncap`

    def __bool__(self) -> bool:
        return bool(self._by_share)

    def append(self, share: str, tenant: str) -> None:
        """``tenant`` (of ``share``) takes the last turn."""
        place = next(self._order)
        waiting = self._by_share.get(share)
        if waiting is None:
            waiting = self._by_share[share] = deque()
            heapq.heappush(self._heads, (place, share))
        waiting.append((place, tenant))

    def pop_runnable(self, below_cap: Callable[[str], bool]) -> str | None:
        """The first tenant in turn whose share is ``below_cap``, out of the turns; None if none is."""
        while self._heads:
            _, share = self._heads[0]
            if not below_cap(share):
                heapq.heappop(self._heads)
                self._capped.add(share)
                continue
            waiting = self._by_share[share]
            _, tenant = waiting.popleft()
            if waiting:
                heapq.heapreplace(self._heads, (waiting[0][0], share))
            else:
                heapq.heappop(self._heads)
                del self._by_share[share]
            return tenant
        return None

    def uncap(self, share: str) -> None:
        """``share`` may be below its cap again: its first tenant is a candidate again."""
        if share in self._capped:
            self._capped.discard(share)
            heapq.heappush(self._heads, (self._by_share[share][0][0], share))

    def clear(self) -> None:
        self._by_share.clear()
        self._heads.clear()
        self._capped.clear()


class _TenantExecutor(Executor):
    def __init__(self, pool: FairPool, tenant: str) -> None:
        self._pool = pool
        self._tenant = tenant

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        return self._pool.submit_as(self._tenant, fn, *args, **kwargs)
