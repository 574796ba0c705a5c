"""What a runtime's answers become: OpenWhisk's categories and wording."""

from __future__ import annotations

from owx.platform.embedded.outcome import classify_run, init_error
from owx.platform.embedded.proxy import ProxyResponse
from owx.platform.types import DEVELOPER_ERROR


def test_a_runtime_answer_that_is_not_a_result_is_reported_in_openwhisks_words():
    """A runtime (a blackbox image's, say) answering /run or /init with something owx cannot take:
    OpenWhisk's message with the body as sent, or a full stop when there was none."""
    assert classify_run(ProxyResponse(200, "<html>oops</html>", False)) == (
        DEVELOPER_ERROR, {"error": "The action did not produce a valid JSON or JSON Array response: <html>oops</html>"})
    assert classify_run(ProxyResponse(200, "", False)) == (
        DEVELOPER_ERROR, {"error": "The action did not produce a valid JSON or JSON Array response."})
    assert classify_run(ProxyResponse(200, 7, True)) == (
        DEVELOPER_ERROR, {"error": "The action did not produce a valid JSON or JSON Array response: 7"})
    assert init_error(ProxyResponse(500, {"ok": False}, True)) == {
        "error": 'The action failed during initialization: {"ok": false}'}
