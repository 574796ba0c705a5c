"""One memory ledger: pools, reservations (Canary's gang admission) and holds (Escra) share each node's budget."""

from __future__ import annotations

import dataclasses
import threading

from platform_helpers import ECHO, SLEEP, request, spec
from tests.fixtures.polling import wait_for

from owx.platform.embedded.container_limits import MB
from owx.platform.ledger import MemoryLedger, container_holder
from owx.platform.types import SUCCESS


def test_holds_are_all_or_nothing_and_forced_holds_overcommit() -> None:
    ledger = MemoryLedger()
    ledger.add_node("a", 1000)
    ledger.add_node("b", 500)
    assert ledger.place_all(["x", "y"], 400, ["a", "b"]) == {"x": "a", "y": "a"}  # where the most room is
    assert ledger.place_all(["z1", "z2"], 400, ["a", "b"]) is None  # one fits, two do not: neither is held
    assert ledger.held("z1") == 0 and ledger.free("a") == 200
    assert not ledger.hold("big", "b", 600)
    assert ledger.hold("big", "b", 600, force=True) and ledger.free("b") == -100
    ledger.move("x", "b")
    assert (ledger.free("a"), ledger.free("b")) == (600, -500)
    assert ledger.take("x", "a") == 0 and ledger.take("x", "b") == 400 and ledger.held("x") == 0
    assert ledger.release("y") == 400 and ledger.release("y") == 0


def test_place_all_counts_what_evicting_idle_containers_frees() -> None:
    ledger = MemoryLedger()
    ledger.add_node("a", 1000, reclaimable=lambda: 600)
    ledger.hold(container_holder("idle"), "a", 600)
    assert ledger.place_all(["f"], 800, ["a"]) == {"f": "a"}
    assert ledger.free("a") == -400


def test_a_reservation_becomes_the_new_container_and_is_not_counted_twice(make_platform) -> None:
    platform = make_platform(user_memory_mb=512)
    assert platform.ledger.hold("function:f1", "node0", 256 * MB)
    action = spec(ECHO, memory_mb=256)
    outcome = platform.run(action, dataclasses.replace(request(), reservation="function:f1"), node="node0")
    assert outcome.status == SUCCESS
    assert platform.ledger.held("function:f1") == 0
    assert platform.ledger.used("node0") == 256 * MB  # the container only
    # A warm container needs no new memory: a reservation brought to it is given back.
    assert platform.ledger.hold("function:f2", "node0", 256 * MB)
    assert platform.run(action, dataclasses.replace(request(), reservation="function:f2")).status == SUCCESS
    assert platform.ledger.held("function:f2") == 0 and platform.ledger.used("node0") == 256 * MB


def test_a_reserved_activation_does_not_wait_behind_the_queue(make_platform) -> None:
    platform = make_platform(user_memory_mb=512)
    busy = spec(SLEEP, memory_mb=256)
    done = threading.Event()
    runner = threading.Thread(target=lambda: (platform.run(busy, request(s=1.5)), done.set()))
    runner.start()
    wait_for(lambda: platform.ledger.used("node0") == 256 * MB, what="the busy container")
    assert platform.ledger.hold("function:f", "node0", 256 * MB)  # the rest of the budget, held in advance
    outcome = platform.run(spec(ECHO, memory_mb=256), dataclasses.replace(request(), reservation="function:f"))
    assert outcome.status == SUCCESS and not done.is_set()
    runner.join()


def test_a_forced_hold_over_the_budget_evicts_idle_containers(make_platform) -> None:
    platform = make_platform(user_memory_mb=512)
    for _ in range(2):
        assert platform.run(spec(ECHO, memory_mb=256), request()).status == SUCCESS
    assert len(platform.containers()) == 2 and platform.ledger.free("node0") == 0
    platform.ledger.hold("escra-reserve:node0", "node0", 200 * MB, force=True)
    wait_for(lambda: platform.ledger.free("node0") == 56 * MB, what="one idle container to be evicted")
    assert len(platform.containers()) == 1
