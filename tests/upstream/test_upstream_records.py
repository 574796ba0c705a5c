"""What owx reads from an upstream's activation records: a platform failure only in the platform's
own words, never in words an action chose."""

from __future__ import annotations

from owx.platform.openwhisk.records import failure_of, outcome_of
from owx.platform.types import EXITED_MESSAGE, INIT_EXITED_MESSAGE, OOM_MESSAGE, TIMEOUT_MESSAGE
from owx.runtimes.protocol import MEMORY_REPORT_PREFIX

DEVELOPER_ERROR = "action developer error"


def test_the_platforms_own_words_name_its_failures() -> None:
    assert failure_of(DEVELOPER_ERROR, {"error": OOM_MESSAGE}) == "oom"
    assert failure_of(DEVELOPER_ERROR, {"error": EXITED_MESSAGE}) == "exited"
    assert failure_of(DEVELOPER_ERROR, {"error": INIT_EXITED_MESSAGE}) == "init"
    assert failure_of(DEVELOPER_ERROR, {"error": TIMEOUT_MESSAGE.format(ms=60000)}) == "timeout"
    assert failure_of("application error", {"error": OOM_MESSAGE}) is None  # returned by the action


def test_an_error_an_action_raised_in_those_words_is_its_own() -> None:
    """The runtime words an uncaught exception ``Name: message``: an exception class named after the
    platform's message made owx retry the action as if its container had died, and raise its
    estimated memory and timeout (found by a probe)."""
    for message in (OOM_MESSAGE, EXITED_MESSAGE, INIT_EXITED_MESSAGE, TIMEOUT_MESSAGE.format(ms=60000)):
        assert failure_of(DEVELOPER_ERROR, {"error": f"{message}: "}) is None
        assert failure_of(DEVELOPER_ERROR, {"error": f"{message}: anything"}) is None


def test_only_the_runtimes_last_line_reports_memory_and_an_actions_lines_stay_in_its_logs() -> None:
    """The runtime writes the container's peak as the last line before its sentinel; an action that
    prints the same words (before it, or late, into the next activation's logs) neither sets the peak
    DiSDeL learns from nor loses its lines."""
    spoof = f"2026-12-07T10:00:00.000Z stdout: {MEMORY_REPORT_PREFIX}1"
    genuine = f"2026-12-07T10:00:00.002Z stdout: {MEMORY_REPORT_PREFIX}73400320"
    record = {"activationId": "a" * 32, "start": 1, "end": 2,
              "response": {"status": "success", "result": {}},
              "logs": [spoof, "2026-12-07T10:00:00.001Z stdout: hello", genuine]}
    outcome = outcome_of(record)
    assert outcome.memory_peak_bytes == 73400320
    assert outcome.logs == [spoof, "2026-12-07T10:00:00.001Z stdout: hello"]
    alone = outcome_of({**record, "logs": [spoof, "2026-12-07T10:00:00.001Z stdout: hello"]})
    assert alone.memory_peak_bytes is None and alone.logs == [spoof, "2026-12-07T10:00:00.001Z stdout: hello"]
