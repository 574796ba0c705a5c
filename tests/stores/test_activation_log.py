"""The activation log on its own: line format, torn lines, replay, rotation, a full disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from owx.gateway.stores.activation_log import ActivationLog, Replayed, decode, encode
from owx.gateway.stores.activations import AcceptedRow, Row, to_accepted, to_row
from owx.gateway.stores.validation import encode_doc
from tests.stores.conftest import activation


def opened(directory: Path, segment_bytes: int = 64 * 1024 * 1024) -> ActivationLog:
    log = ActivationLog(directory, segment_bytes)
    log.replay()
    return log


def replay(directory: Path) -> Replayed:
    """What a new start on ``directory`` replays (the log is closed again)."""
    log = ActivationLog(directory)
    try:
        return log.replay()
    finally:
        log.close()


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def accepted(activation_id: str, **fields: object) -> AcceptedRow:
    return to_accepted({"activationId": activation_id, "namespace": "guest", "name": "hello", **fields})


def lines_of(path: Path) -> list[Row]:
    data = path.read_bytes()
    assert data.endswith(b"\n")
    return [decode(line) for line in data.split(b"\n")[:-1]]


def test_json_text_never_holds_a_raw_tab_or_newline() -> None:
    doc = {"k\tey\n": ["\t", "\n", "\r\n", "\x00\x1f", "\u2028\u2029", "ünï\tçødé"], "n": {"deep": "a\nb"}}
    text = encode_doc(doc)
    assert "\t" not in text and "\n" not in text
    row = to_row(activation("guest", "hello", 1, logs=doc[next(iter(doc))], extra=doc))
    assert decode(encode(row)[:-1]) == row
    assert encode(row).count(b"\n") == 1


def test_rows_come_back_from_replay_with_their_files_private(tmp_path: Path) -> None:
    log = opened(tmp_path / "log")
    record = to_row(activation("guest", "hello", 7, logs=["ünïçødé ✓"]))
    assert [log.append(record), log.append(accepted("open")), log.append(accepted(record.activation_id))] == [1, 2, 3]
    log.close()
    assert (tmp_path / "log").stat().st_mode & 0o777 == 0o700
    assert {p.stat().st_mode & 0o777 for p in (tmp_path / "log").iterdir()} == {0o600}

    replayed = replay(tmp_path / "log")
    assert replayed.records == [(1, record)]
    assert replayed.accepted == [accepted("open")]  # an entry whose record came first is not open either


def three_records_and_an_open_entry(directory: Path) -> tuple[list[Row], Path]:
    """A closed log of three records and the accepted entry ``left``: (the records, its one segment)."""
    log = opened(directory)
    rows = [to_row(activation("guest", "hello", start)) for start in range(3)]
    for row in rows:
        log.append(row)
    log.append(accepted("left"))
    log.close()
    (segment,) = segments(directory)
    return rows, segment


def test_a_torn_last_line_is_ignored_and_everything_before_it_kept(tmp_path: Path) -> None:
    rows, segment = three_records_and_an_open_entry(tmp_path / "log")
    with open(segment, "ab") as file:
        file.write(encode(to_row(activation("guest", "hello", 99)))[:-40])  # an append cut short by a kill

    log = ActivationLog(tmp_path / "log")
    replayed = log.replay()
    assert [row for _, row in replayed.records] == rows
    assert replayed.accepted == [accepted("left")]
    rewritten, current = segments(tmp_path / "log")
    assert segment not in (rewritten, current) and lines_of(rewritten) == [*rows, accepted("left")]
    log.append(added := accepted("after"))
    log.close()
    assert lines_of(current) == [accepted("left"), added]


def test_replay_writes_the_new_segment_before_deleting_the_old_ones(tmp_path: Path) -> None:
    """A crash between the two (both files then exist) loses nothing and doubles nothing."""
    rows, old = three_records_and_an_open_entry(tmp_path / "log")
    kept = old.read_bytes()
    replay(tmp_path / "log")
    old.write_bytes(kept)  # as if the replay died before deleting it
    replayed = replay(tmp_path / "log")
    assert [row for _, row in replayed.records] == rows and replayed.accepted == [accepted("left")]
    assert len(segments(tmp_path / "log")) == 2  # the rewritten one, and the one appends go to


def test_a_restart_carries_over_only_what_the_database_may_lack(tmp_path: Path) -> None:
    """Replayed records the database then commits are not replayed again at the next start (each
    start carried every earlier record over: a log that only grew, and ever longer starts)."""
    rows, _ = three_records_and_an_open_entry(tmp_path / "log")
    log = ActivationLog(tmp_path / "log")
    replayed = log.replay()
    log.committed(replayed.records[-1][0])
    log.append(late := to_row(activation("guest", "hello", 9)))
    log.close()
    again = replay(tmp_path / "log")
    assert [row for _, row in again.records] == [late] and again.accepted == [accepted("left")]


def test_rotation_keeps_open_entries_and_committed_segments_go(tmp_path: Path) -> None:
    log = opened(tmp_path / "log", segment_bytes=4096)
    early = [accepted(f"early-{i}") for i in range(3)]  # never recorded: they must follow every rotation
    for entry in early:
        log.append(entry)
    last = 0
    for start in range(200):
        row = to_row(activation("guest", "hello", start))
        log.append(accepted(row.activation_id))
        last = log.append(row)
        if start % 50 == 49:
            log.committed(last)
            assert len(segments(tmp_path / "log")) == 1  # only the current one is left
    assert int(segments(tmp_path / "log")[-1].stem) > 10  # it did rotate
    unfinished = accepted("unfinished")
    log.append(unfinished)
    assert log.open_accepted() == [*early, unfinished]
    uncommitted = [to_row(activation("guest", "late", start)) for start in range(20)]
    for row in uncommitted:
        log.append(row)
    assert len(segments(tmp_path / "log")) > 1  # segments with uncommitted records stay
    log.close()

    replayed = replay(tmp_path / "log")
    assert replayed.accepted == [*early, unfinished]
    assert [row for _, row in replayed.records][-20:] == uncommitted


def test_open_entries_larger_than_a_segment_do_not_make_every_append_rotate(tmp_path: Path) -> None:
    log = opened(tmp_path / "log", segment_bytes=1024)
    for i in range(20):  # about 2 KB of open entries, carried into every new segment
        log.append(accepted(f"open-{i}", padding="x" * 50))
    for start in range(20):  # about 14 KB of records: a new segment every other record
        log.append(to_row(activation("guest", "hello", start)))
    log.close()
    assert int(segments(tmp_path / "log")[-1].stem) <= 12


def test_an_append_the_disk_cannot_take_leaves_no_partial_line(full_disk: Path) -> None:
    log = opened(full_disk / "log")
    written: list[Row] = []
    with pytest.raises(OSError):
        for start in range(10):  # 20 KB each: the fourth does not fit in 64 KiB, part of it would
            row = to_row(activation("guest", "hello", start, logs=["x" * 20_000]))
            log.append(row)
            written.append(row)
    assert len(written) == 3
    (segment,) = segments(full_disk / "log")
    assert lines_of(segment) == written
    log.append(small := accepted("small"))  # what still fits is appended after the last whole line
    assert lines_of(segment) == [*written, small]
    log.close()
