"""Canary's n: how many checkpoints of a function are kept."""

from __future__ import annotations

from owx.canary.checkpoint.model import IndexEntry
from owx.canary.checkpoint.options import StoreOptions
from owx.canary.checkpoint.retention import keep_count

MB = 1024 * 1024


def entries(count: int, interval_s: float, size: int) -> list[IndexEntry]:
    return [IndexEntry(seq=i + 1, timestamp=1000.0 + i * interval_s, size=size) for i in range(count)]


def test_default_is_three_for_infrequent_small_checkpoints():
    assert keep_count(entries(4, 60.0, 1 * MB), StoreOptions()) == 3
    assert keep_count(entries(1, 0.0, 1 * MB), StoreOptions()) == 3


def test_frequent_checkpoints_keep_enough_to_span_the_history_window():
    options = StoreOptions(history_s=30.0, keep_max=10)
    assert keep_count(entries(4, 5.0, 1 * MB), options) == 6  # 30 s / 5 s
    assert keep_count(entries(4, 0.5, 1 * MB), options) == 10  # capped at keep_max
    assert keep_count(entries(4, 0.0, 1 * MB), options) == 10  # same timestamp: as frequent as it gets


def test_large_checkpoints_keep_fewer_within_the_budget_but_never_none():
    options = StoreOptions(budget=512 * MB)
    assert keep_count(entries(4, 60.0, 200 * MB), options) == 2
    assert keep_count(entries(4, 60.0, 2000 * MB), options) == 1
    assert keep_count(entries(4, 0.1, 100 * MB), options) == 5  # frequent but large: the budget wins
