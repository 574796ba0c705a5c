"""The entity store's writer lock: owners take turns, so one owner's queue of writes does not hold another's."""

from __future__ import annotations

import threading
import time

from owx.gateway.stores.turn_lock import TurnLock


def test_an_owner_waits_for_at_most_one_write_of_another_that_queued_many_before_it() -> None:
    lock, order, release = TurnLock(), [], threading.Event()

    def write(owner: str, label: str) -> None:
        with lock.hold(owner):
            order.append(label)

    def first() -> None:
        with lock.hold("flood"):
            order.append("flood-0")
            release.wait(10)

    holder = threading.Thread(target=first)
    holder.start()
    while not order:
        time.sleep(0.001)
    waiters = []
    for index, (owner, label) in enumerate([("flood", "flood-1"), ("flood", "flood-2"), ("flood", "flood-3"),
                                            ("victim", "victim")]):
        waiters.append(threading.Thread(target=write, args=(owner, label)))
        waiters[-1].start()
        while sum(len(tickets) for tickets in lock._waiting.values()) < index + 1:  # queued in this order
            time.sleep(0.001)
    release.set()
    for thread in (holder, *waiters):
        thread.join(10)
    assert order == ["flood-0", "flood-1", "victim", "flood-2", "flood-3"]
