"""Every accepted activation keeps its record: results that are not storable JSON or too large, and logs
past the limit, are cut with OpenWhisk's messages, never lost (blocking or not)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from owx.gateway.pipeline.records import MB
from owx.platform.loglines import cost
from owx.platform.types import DEVELOPER_ERROR_LOG_MESSAGE

CODE = '''
import sys

END = "XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX"

def answer_once(raw):
    """This activation's answer is ``raw``, as a runtime the action controls could send it."""
    import owx.runtimes.protocol as runtime
    encode = runtime._encode
    def once(answer):
        runtime._encode = encode
        return raw
    runtime._encode = once
    return {}

def main(args):
    what = args["what"]
    if what == "nan":
        return {"x": float("nan")}
    if what == "inf":
        return {"x": float("inf")}
    if what == "deep":
        value = []
        for _ in range(args.get("depth", 150)):
            value = [value]
        return {"x": value}
    if what == "deep-objects-sent":
        return answer_once(b'{"a":' * 60_000 + b"1" + b"}" * 60_000)
    if what == "lists-sent":  # 100 MB of empty lists: cheap to send, costly to hold and to parse
        return answer_once(b"[" + b"[]," * (100 * 1024 * 1024 // 3) + b"[]]")
    if what == "surrogate":
        return {"x": "\\ud800"}
    if what == "big":
        return {"x": "y" * (2 * 1024 * 1024)}
    if what == "print":
        print("hello")
        return {"printed": True}
    if what == "raise":
        print("before the error")
        raise ValueError("boom")
    if what == "empty-lines":
        sys.stdout.write("\\n" * 3_000_000)
        return {"done": True}
    if what == "sentinels":
        sys.stdout.write((END + "\\nline\\n") * 100_000)
        return {"done": True}
    return {"ok": True}
'''


def rss_peak_kib() -> int:
    """This process's (the gateway's) peak resident memory since the last reset."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def reset_rss_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


@pytest.fixture(scope="module")
def misbehaving(gateway):
    http = gateway.session()
    name = f"misbehave-{uuid.uuid4().hex[:6]}"
    body = {"exec": {"kind": "python:3", "code": CODE}, "limits": {"logs": 1}}
    assert http.put(gateway.api(f"actions/{name}"), json=body).status_code == 200
    return http, name


def run(gateway, http, name, blocking: bool, **params):
    """The stored record of one activation (fetched back from the store either way)."""
    answer = http.post(gateway.api(f"actions/{name}"), params={"blocking": str(blocking).lower()}, json=params)
    assert answer.status_code in (200, 202, 502), answer.text[:300]
    return gateway.wait_record(http, answer.headers["x-openwhisk-activation-id"])


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "non-blocking"])
@pytest.mark.parametrize("what, detail", [
    ("nan", "nan is not a JSON number"),
    ("inf", "inf is not a JSON number"),
    ("deep", "nested deeper than 100 levels"),
])
def test_results_that_are_not_storable_json_become_developer_errors(gateway, misbehaving, blocking, what, detail):
    http, name = misbehaving
    record = run(gateway, http, name, blocking, what=what)
    assert record["response"]["status"] == "action developer error"
    assert record["response"]["result"] == {
        "error": f"The action did not produce a valid JSON or JSON Array response: {detail}"}


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "non-blocking"])
def test_an_answer_nested_deeper_than_a_parser_holds_is_a_developer_error(gateway, misbehaving, blocking):
    """60,000 nested objects from the runtime (the tenant's process): recorded, and the gateway goes on."""
    http, name = misbehaving
    record = run(gateway, http, name, blocking, what="deep-objects-sent")
    assert record["response"]["status"] == "action developer error"
    assert record["response"]["result"]["error"].startswith(
        "The action did not produce a valid JSON or JSON Array response: ")
    assert run(gateway, http, name, blocking, what="print")["response"]["result"] == {"printed": True}


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "non-blocking"])
@pytest.mark.parametrize("what", ["surrogate", "deep-5000"])
def test_results_the_runtime_cannot_send_are_recorded(gateway, misbehaving, blocking, what):
    http, name = misbehaving
    params = {"what": "deep", "depth": 5000} if what == "deep-5000" else {"what": what}
    record = run(gateway, http, name, blocking, **params)
    assert record["response"]["success"] is False and "error" in record["response"]["result"]


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "non-blocking"])
def test_a_result_over_the_limit_is_an_application_error_holding_its_first_megabyte(gateway, misbehaving, blocking):
    """OpenWhisk's truncated response: the message, then the result as sent, cut at the limit."""
    http, name = misbehaving
    answer = http.post(gateway.api(f"actions/{name}"), params={"blocking": str(blocking).lower()}, json={"what": "big"})
    assert answer.status_code == (502 if blocking else 202)
    record = gateway.wait_record(http, answer.headers["x-openwhisk-activation-id"])
    whole = len('{"x": ""}') + 2 * MB  # the bytes the runtime sent (Python's json, its separators)
    message = f"The action produced a response that exceeded the allowed length: {whole} > {MB} bytes. "
    prefix = message + 'The truncated response was: {"x": "'
    assert record["response"]["status"] == "application error" and record["response"]["statusCode"] == 1
    assert record["response"]["result"] == {"error": prefix + "y" * (MB - len('{"x": "'))}
    assert record["response"]["size"] == whole


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "non-blocking"])
@pytest.mark.parametrize("what", ["raise", "nan"])
def test_a_developer_errors_logs_end_with_openwhisks_warning_once(gateway, misbehaving, blocking, what):
    """OpenWhisk's invoker ends every developer error's logs with a warning that some may be missing,
    whether the runtime failed (an exception) or its result was not valid JSON."""
    http, name = misbehaving
    record = run(gateway, http, name, blocking, what=what)
    logs = record["logs"]
    assert record["response"]["status"] == "action developer error"
    assert logs[-1].endswith(" stderr: " + DEVELOPER_ERROR_LOG_MESSAGE)
    assert sum(DEVELOPER_ERROR_LOG_MESSAGE in line for line in logs) == 1
    if what == "raise":
        assert any(line.endswith(" stdout: before the error") for line in logs)


def test_other_outcomes_logs_carry_no_warning_and_a_sequence_logs_its_components_alone(gateway, misbehaving):
    http, name = misbehaving
    printed = run(gateway, http, name, True, what="print")
    assert [line.split(" ", 1)[1] for line in printed["logs"]] == ["stdout: hello"]
    seq = f"seq-{uuid.uuid4().hex[:6]}"
    assert http.put(gateway.api(f"actions/{seq}"), json={"exec": {"kind": "sequence", "components": [name]}}).ok
    answer = http.post(gateway.api(f"actions/{seq}"), params={"blocking": "true"}, json={"what": "raise"})
    record = gateway.wait_record(http, answer.headers["x-openwhisk-activation-id"])
    assert record["response"]["status"] == "action developer error"
    assert len(record["logs"]) == 1 and gateway.wait_record(http, record["logs"][0])["name"] == name


def test_an_action_with_a_log_limit_of_zero_keeps_no_logs(gateway):
    """OpenWhisk does not collect the logs of an action whose limit is 0 MB: not even a truncation
    line or a developer error's warning."""
    http = gateway.session()
    name = f"silent-{uuid.uuid4().hex[:6]}"
    body = {"exec": {"kind": "python:3", "code": CODE}, "limits": {"logs": 0}}
    assert http.put(gateway.api(f"actions/{name}"), json=body).json()["limits"]["logs"] == 0
    printed, failed = (run(gateway, http, name, True, what=what) for what in ("print", "raise"))
    assert printed["response"]["result"] == {"printed": True} and printed["logs"] == []
    assert failed["response"]["status"] == "action developer error" and failed["logs"] == []


def test_three_million_empty_log_lines_are_cut_at_the_log_limit(gateway, misbehaving):
    """Each line costs its record bytes, so the 1 MB limit holds ~27,000 empty lines; the record is kept
    and the gateway's memory grows by a bounded amount while collecting."""
    http, name = misbehaving
    run(gateway, http, name, True, what="ok")  # warm container: only the logs below are measured
    reset_rss_peak()
    before = rss_peak_kib()
    record = run(gateway, http, name, False, what="empty-lines")
    grown_mib = (rss_peak_kib() - before) / 1024
    logs = record["logs"]
    limit = 1 * MB
    assert record["response"]["result"] == {"done": True}
    assert logs[-1].endswith(f"stderr: Logs were truncated because the total bytes size exceeds the limit of {limit} bytes.")
    assert sum(cost(line) for line in logs[:-1]) <= limit
    assert len(logs) - 1 == limit // cost(logs[0])
    assert grown_mib < 64, f"gateway peak memory grew by {grown_mib:.0f} MiB"


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "non-blocking"])
def test_an_answer_over_the_result_limit_is_cut_as_sent_and_never_parsed(gateway, misbehaving, blocking):
    """OpenWhisk's truncated response from the answer's bytes: the gateway (every tenant's) keeps only
    the limit's worth of them (parsing 20 MB of empty lists cost it about a gigabyte and seconds of its
    loop; holding 100 MB, twice that while joined)."""
    http, name = misbehaving
    run(gateway, http, name, blocking, what="ok")
    reset_rss_peak()
    before = rss_peak_kib()
    record = run(gateway, http, name, blocking, what="lists-sent")
    grown_mib = (rss_peak_kib() - before) / 1024
    size = len(b"[") + 3 * (100 * 1024 * 1024 // 3) + len(b"[]]")
    error = record["response"]["result"]["error"]
    assert record["response"]["status"] == "application error"
    assert error.startswith(f"The action produced a response that exceeded the allowed length: {size} > {MB} bytes. "
                            "The truncated response was: [[],[],")
    assert grown_mib < 48, f"gateway peak memory grew by {grown_mib:.0f} MiB"


def test_an_action_printing_sentinels_gains_nothing(gateway, misbehaving):
    """100,000 forged activation ends: the record is kept and later activations get their own logs."""
    http, name = misbehaving
    record = run(gateway, http, name, True, what="sentinels")
    assert record["response"]["result"] == {"done": True}
    assert sum(cost(line) for line in record["logs"]) <= 1 * MB + 200
    after = run(gateway, http, name, True, what="ok")
    assert after["response"]["result"] == {"ok": True}
