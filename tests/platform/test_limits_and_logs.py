"""OpenWhisk's limit formulas and per-activation log collection."""

from __future__ import annotations

import re
import threading
import time
import tracemalloc
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from owx.common.cgroups import UNLIMITED
from owx.platform.embedded.container_limits import MIN_SHARES, cpu_quota_us, cpu_shares
from owx.platform.embedded.logs import FREE_BYTES, MAX_PENDING_SEGMENTS, SENTINEL, LogCollector
from owx.platform.loglines import cost, cost_of_lines, line, timestamp
from owx.platform.types import LOG_FAILURE_MESSAGE, LOG_TRUNCATED_MESSAGE

END = (SENTINEL + "\n").encode()


def test_cpu_shares_follow_openwhisk():
    assert cpu_shares(256, 2048) == 128
    assert cpu_shares(512, 2048) == 256
    assert cpu_shares(2048, 2048) == 1024
    assert cpu_shares(4096, 2048) == 1024  # larger than the budget: a full share, not a division by zero
    assert cpu_shares(128, 1024 * 1024) == MIN_SHARES


def test_cpu_quota_only_with_user_cpus():
    assert cpu_quota_us(256, 2048, None) == UNLIMITED
    assert cpu_quota_us(256, 2048, 2.0) == 25_000  # a quarter of a CPU per 100 ms period
    assert cpu_quota_us(1, 2048, 1.0) == 1000  # never below the kernel's 1 ms minimum


def text(lines: list[str]) -> list[str]:
    return [line.split(" ", 1)[1] for line in lines]


def test_activations_are_split_at_sentinels_and_merged_by_arrival():
    logs = LogCollector()
    logs.feed("stdout", b"one\n")
    logs.feed("stderr", b"two\n" + END)
    logs.feed("stdout", b"thr")
    logs.feed("stdout", b"ee\n" + END + b"next\n")
    assert text(logs.collect(0.1)) == ["stdout: one", "stderr: two", "stdout: three"]
    logs.feed("stdout", END)
    logs.feed("stderr", END)
    assert text(logs.collect(0.1)) == ["stdout: next"]


def test_collect_waits_for_sentinels_then_warns():
    logs = LogCollector()
    logs.feed("stdout", b"early\n")
    threading.Timer(0.05, lambda: (logs.feed("stdout", END), logs.feed("stderr", END))).start()
    started = time.monotonic()
    assert text(logs.collect(2.0)) == ["stdout: early"]
    assert time.monotonic() - started < 1.0
    logs.feed("stdout", b"cut off\n")
    assert text(logs.collect(0.05)) == ["stdout: cut off", "stderr: " + LOG_FAILURE_MESSAGE]


def test_truncation_message_and_bounded_buffer():
    limit = 2 * cost("2026-01-01T00:00:00.000000Z stdout: 12345")  # two such lines fit
    logs = LogCollector(limit_bytes=limit)
    logs.feed("stdout", b"12345\n67890\nabcdef\n" + b"x" * 1000 + b"\n" + END)
    logs.feed("stderr", END)
    truncated = "stderr: " + LOG_TRUNCATED_MESSAGE.format(limit=limit)
    assert text(logs.collect(0.1)) == ["stdout: 12345", "stdout: 67890", truncated]


def test_two_streams_within_the_limit_each_are_cut_together():
    """The limit holds for the activation: stdout and stderr that each fit but together do not are cut
    after the lines that arrived first."""
    limit = 2 * cost("2026-01-01T00:00:00.000000Z stdout: 12345")
    logs = LogCollector(limit_bytes=limit)
    logs.feed("stdout", b"12345\n")
    logs.feed("stderr", b"errr1\n")
    logs.feed("stdout", b"67890\n" + END)
    logs.feed("stderr", b"errr2\n" + END)
    truncated = "stderr: " + LOG_TRUNCATED_MESSAGE.format(limit=limit)
    assert text(logs.collect(0.1)) == ["stdout: 12345", "stderr: errr1", truncated]


def test_log_timestamps_keep_openwhisks_format_across_seconds():
    """Stamps reuse the text of the current second: they still match datetime's own formatting and
    rounding going forward, back, and when the microseconds round up into the next second."""
    for epoch in (1795893913.2359995, 1795893913.9999996, 1795893914.0, 1795893912.5, 0.0, 1e9 + 0.9999995):
        assert timestamp(epoch) == datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_empty_lines_count_against_the_limit():
    """Every line costs its record bytes: 3 million empty lines stop at the limit, in bounded memory."""
    limit = 1024 * 1024
    logs = LogCollector(limit_bytes=limit)
    chunk = b"\n" * 65536
    tracemalloc.start()
    try:
        for _ in range(3_000_000 // len(chunk) + 1):
            logs.feed("stdout", chunk)
        held = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert held < 8 * limit  # capped while reading, not after
    logs.feed("stdout", END)
    logs.feed("stderr", END)
    lines = logs.collect(0.1)
    assert lines[-1].endswith(LOG_TRUNCATED_MESSAGE.format(limit=limit))
    assert sum(cost(line) for line in lines[:-1]) <= limit
    assert len(lines) - 1 == limit // cost(lines[0])  # as many empty lines as fit, no more


def test_sentinel_split_across_chunks_after_truncation():
    logs = LogCollector(limit_bytes=0)
    logs.feed("stdout", b"dropped\n" + END[:10])
    logs.feed("stdout", END[10:] + b"next activation\n")
    logs.feed("stderr", END)
    assert text(logs.collect(0.1)) == ["stderr: " + LOG_TRUNCATED_MESSAGE.format(limit=0)]


def test_output_is_held_past_the_limit_until_the_activation_ends():
    limit = 2 * cost("2026-01-01T00:00:00.000000Z stdout: 12345")
    logs = LogCollector(limit_bytes=limit)
    logs.feed("stdout", b"12345\n67890\n")
    assert not logs.held("stdout") and not logs.held()  # within the limit: every line is kept
    logs.feed("stdout", b"abcdef\n")
    assert logs.held("stdout") and logs.held() and not logs.held("stderr")
    logs.feed("stdout", END)  # the activation ended: the next one's lines count afresh
    assert not logs.held()


def test_an_action_printing_sentinels_of_its_own_is_held_once_they_crowd():
    """Fake sentinels never truncate a segment, but the segments they close pile up to their bound."""
    logs = LogCollector()
    logs.feed("stdout", b"x\n" + END)
    assert not logs.held("stdout")  # one activation's lines, waiting to be collected
    for _ in range(MAX_PENDING_SEGMENTS):
        logs.feed("stdout", b"x\n" + END)
    assert logs.held("stdout")


def test_an_activations_first_output_is_read_freely_and_the_rest_held_though_kept():
    logs = LogCollector()  # OpenWhisk's 10 MB limit, well above FREE_BYTES
    line = b"y" * 100 + b"\n"
    logs.feed("stdout", line * (FREE_BYTES // 200))
    assert not logs.held("stdout")
    logs.feed("stdout", line * (FREE_BYTES // 100))
    assert logs.held("stdout")  # past its free share, within its limit: held, every line still kept
    logs.feed("stdout", END)
    logs.feed("stderr", END)
    assert not logs.held()
    lines = logs.collect(0.1)
    assert len(lines) == FREE_BYTES // 200 + FREE_BYTES // 100 and not any("truncated" in x for x in lines)


PLAIN = [b"x", b"\xc3\xa9", b"\xe2\x82", b"\xff", b'"', b"\\", b"\t", b" ", b"\n", b"\n"]
PIECES = PLAIN * 10 + [b"\r", SENTINEL.encode()]  # now and then a carriage return, or a sentinel


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.sampled_from(PIECES), min_size=20, max_size=200), cuts=st.lists(st.integers(0, 800), max_size=8),
       limit=st.integers(0, 2000))
def test_lines_taken_in_a_chunk_at_once_are_the_lines_taken_one_by_one(pieces, cuts, limit):
    """Many lines arriving in one chunk are taken at once (most output: a fifth of the cost); what an
    activation's record gets, and what it counts against the limit, is what each line taken alone gives."""
    output = b"".join(pieces)
    at_once, one_by_one = LogCollector(limit_bytes=limit), LogCollector(limit_bytes=limit)
    bounds = [0, *sorted(cut % (len(output) + 1) for cut in cuts), len(output)]
    for start, end in zip(bounds, bounds[1:]):
        if end > start:  # an empty chunk is the stream's end
            at_once.feed("stdout", output[start:end])
    for piece in re.split(b"(?<=\n)", output):
        if piece:
            one_by_one.feed("stdout", piece)
    sentinels = output.count(SENTINEL.encode())
    for logs in (at_once, one_by_one):
        logs.feed("stdout", END)
        logs.feed("stderr", END * (sentinels + 1))
        logs.end()
    for _ in range(sentinels + 2):
        assert _unstamped(at_once.collect(0)) == _unstamped(one_by_one.collect(0))


@given(text=st.text(st.sampled_from('x\n\t"\\\x00é\u2028\ufffd€'), max_size=60))
def test_lines_cost_together_what_each_costs_alone(text):
    prefix = line(0, "stderr", "")
    assert cost_of_lines(prefix, text) == sum(cost(prefix + part) for part in text.split("\n"))


def _unstamped(lines: list[str]) -> list[str]:
    return [line[len(timestamp(0)):] for line in lines]
