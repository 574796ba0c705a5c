"""What owx reads from an upstream's activation records: a platform failure only in the platform's
own words, never in words an action chose."""

from __future__ import annotations

from owx.platform.openwhisk.records import failure_of
from owx.platform.types import EXITED_MESSAGE, INIT_EXITED_MESSAGE, OOM_MESSAGE, TIMEOUT_MESSAGE

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
