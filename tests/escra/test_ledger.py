"""The pool's accounting follows Escra's resizes through the PoolLedger agreement."""

from __future__ import annotations

import threading

from tests.fixtures.polling import wait_for
from owx.bench.escra.procs import IDLE, python

from owx.escra_agent.ledger import PoolLedger

MIB = 1 << 20


class Book:
    """A pool's memory book: userMemory minus what containers and holds account for."""

    def __init__(self, user_memory: int) -> None:
        self.user_memory = user_memory
        self.containers: dict[str, int] = {}
        self.holds: dict[str, int] = {}
        self.lock = threading.Lock()

    def on_resize(self, container_id: str, memory_bytes: int) -> None:
        with self.lock:
            if memory_bytes:
                self.containers[container_id] = memory_bytes
            else:
                self.containers.pop(container_id, None)

    def on_hold(self, holder: str, memory_bytes: int) -> None:
        with self.lock:
            self.holds[holder] = memory_bytes

    def free_bytes(self) -> int:
        with self.lock:
            return self.user_memory - sum(self.containers.values()) - sum(self.holds.values())


def test_pool_book_follows_initial_limits_reclaim_and_removal(local_escra, container):
    book = Book(1024 * MIB)
    assert isinstance(book, PoolLedger)
    allocator, agent = local_escra(memory_mb=1024, containers=2, ledger=book, reclaim_interval_s=0.5)
    group, proc = container("c1", *python(IDLE))
    wait_for(lambda: book.containers.get("c1") == group.memory().limit)
    assert book.holds["escra-reserve:n1"] == 128 * MIB  # the agent's rescue reserve is held in the pool
    # reclaimed to usage + δ, in the book and then in the cgroup
    wait_for(lambda: book.containers["c1"] < 100 * MIB and book.containers["c1"] == group.memory().limit)
    assert book.free_bytes() == allocator.view().apps["app"]["memory_free"]
    proc.kill()
    proc.wait()
    group.destroy()
    wait_for(lambda: "c1" not in book.containers)


def test_allocator_never_grants_beyond_what_the_pool_has_free(local_escra, container):
    book = Book(1024 * MIB)
    book.on_resize("admitted-by-pool", 900 * MIB)  # the pool admitted a container Escra has not seen yet
    allocator, agent = local_escra(memory_mb=1024, containers=2, ledger=book)
    group, _ = container("c1", *python(IDLE))
    wait_for(lambda: "c1" in allocator.view().containers)
    # eq. 2.2 would give 409 MiB; the pool has 124 MiB free minus σ: only the floor usage + δ is given
    wait_for(lambda: group.memory().limit < 100 * MIB)  # the agent applies the allocator's limit
    assert book.free_bytes() >= 0  # the rescue reserve took what was left, not more
    assert allocator.view().apps["app"]["memory_free"] <= book.free_bytes()
