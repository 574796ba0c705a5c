"""The namespace throttle's 429s, worded and counted as OpenWhisk's entitlement answers them."""

from __future__ import annotations

import pytest

from owx.gateway.errors import ApiError
from owx.gateway.pipeline.admission import Throttle


def test_over_its_concurrency_a_namespace_is_told_how_many_run():
    throttle = Throttle(per_minute=100, concurrent=2)
    throttle.admit("a")
    throttle.admit("a")
    with pytest.raises(ApiError) as refused:
        throttle.admit("a")
    assert refused.value.status == 429
    assert refused.value.message == "Too many concurrent requests in flight (count: 2, allowed: 2)."
    throttle.admit("b")  # another namespace has its own
    throttle.release("a")
    throttle.admit("a")


def test_refused_invokes_spend_the_rate_and_the_check_counts_nothing():
    throttle = Throttle(per_minute=3, concurrent=10)
    for _ in range(5):
        throttle.check_rate("a")  # checking alone spends nothing
    throttle.count_refused("a")
    throttle.count_refused("a")
    throttle.admit("a")
    with pytest.raises(ApiError) as refused:
        throttle.check_rate("a")
    assert refused.value.message == "Too many requests in the last minute (count: 4, allowed: 3)."
    throttle.check_rate("b")


def test_an_entry_that_cannot_be_admitted_holds_back_its_own_namespace_only():
    """A job whose memory cannot be reserved (one tenant asked for a whole node) waits, with the
    entries of its namespace behind it; other namespaces' entries are admitted meanwhile."""
    throttle = Throttle(per_minute=100, concurrent=10)
    admitted: list[str] = []
    room = {"big": False}
    throttle.enqueue("a", 4, lambda: admitted.append("a-big"), lambda: room["big"])
    throttle.enqueue("a", 1, lambda: admitted.append("a-small"), lambda: True)
    throttle.enqueue("b", 1, lambda: admitted.append("b"), lambda: True)
    assert admitted == ["b"] and throttle.queued("a") == 5
    room["big"] = True
    throttle.pump()
    assert admitted == ["b", "a-big", "a-small"]
