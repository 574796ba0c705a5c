"""History in owx's real entity store (SQLite file), opened per operation."""

from __future__ import annotations

import threading
from pathlib import Path

from owx.disdel.history import FailureRecord, open_history


def test_history_survives_reopening_and_records_failures(tmp_path: Path) -> None:
    history = open_history(tmp_path)
    assert history.get("sig") is None
    history.update("sig", lambda h: h.model_copy(update={"runs": h.runs + 1, "sec_per_sample_epoch": 0.002}))
    failure = FailureRecord(kind="timeout", role="train", memory_mb=512, timeout_ms=60_000)
    history.update("sig", lambda h: h.with_failure(failure, 120_000))
    again = open_history(tmp_path).get("sig")
    assert again is not None
    assert (again.runs, again.sec_per_sample_epoch, again.timeout_floor_ms) == (1, 0.002, 120_000)
    assert again.failures[0].kind == "timeout"


def test_concurrent_updates_are_not_lost(tmp_path: Path) -> None:
    history = open_history(tmp_path)

    def bump() -> None:
        for _ in range(5):
            history.update("sig", lambda h: h.model_copy(update={"runs": h.runs + 1}))

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert history.get("sig").runs == 20
