"""A blocking invoke answers once its record is durable: in the activation log at once, without
waiting for the database, or, when the log cannot take it, once the database has committed it. No
worker thread waits for commits: a slow database holds nothing back until the records waiting for it
reach the queue's bound; then new invokes are refused at once (503) and taken ones are still recorded."""

from __future__ import annotations

import errno
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from owx.gateway.stores.activations import ActivationRow
from tests.fixtures.polling import wait_for
from tests.gateway.conftest import RunningGateway, start_gateway

CODE = "def main(args):\n    return {'n': args.get('n', 0)}\n"
WORKERS = 2


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory) -> Iterator[RunningGateway]:
    server, running = start_gateway(tmp_path_factory.mktemp("durable"), gateway={"workers": WORKERS})
    http = running.session()
    assert http.put(running.api("actions/echo?overwrite=true"), json={"exec": {"kind": "python:3", "code": CODE}}).ok
    assert http.post(running.api("actions/echo?blocking=true"), json={"n": 0}).status_code == 200  # warm
    yield running
    server.stop()


@contextmanager
def commits_held(gateway: RunningGateway) -> Iterator[None]:
    """The activation store's writer stops before each commit until the block ends (a database
    that has stalled)."""
    writer = gateway.service.activations._writer  # type: ignore[attr-defined]
    commit, release = writer._commit, threading.Event()

    def held(rows):
        release.wait()
        commit(rows)

    writer._commit = held
    try:
        yield
    finally:
        release.set()
        writer._commit = commit


@contextmanager
def log_refusing_records(gateway: RunningGateway) -> Iterator[None]:
    """The activation log cannot take records (as on a full disk); accepted entries still fit."""
    activation_log = gateway.service.activations._writer._log  # type: ignore[attr-defined]
    append = activation_log.append

    def refusing(row):
        if isinstance(row, ActivationRow):
            raise OSError(errno.ENOSPC, "no space left on device")
        return append(row)

    activation_log.append = refusing
    try:
        yield
    finally:
        del activation_log.append


def in_activation_log(gateway: RunningGateway, activation_id: str) -> bool:
    segments = (gateway.service.settings.data_dir / "activation-log").glob("*.log")
    return any(f"r\t{activation_id}\t".encode() in segment.read_bytes() for segment in segments)


def test_a_blocking_invoke_answers_once_its_record_is_in_the_activation_log(two_workers: RunningGateway) -> None:
    http = two_workers.session()
    with commits_held(two_workers):
        reply = http.post(two_workers.api("actions/echo?blocking=true"), json={"n": 7}, timeout=30)
        assert reply.status_code == 200, reply.text
        activation_id = reply.json()["activationId"]
        assert in_activation_log(two_workers, activation_id)  # durable, though no commit got through
        record = http.get(two_workers.api(f"activations/{activation_id}")).json()
        assert record["response"]["result"] == {"n": 7}


def test_a_record_the_log_cannot_take_is_answered_only_once_committed(two_workers: RunningGateway) -> None:
    http = two_workers.session()
    with ThreadPoolExecutor(1) as pool:
        with log_refusing_records(two_workers), commits_held(two_workers):
            answer = pool.submit(http.post, two_workers.api("actions/echo?blocking=true"), json={"n": 8}, timeout=60)
            time.sleep(1.5)
            assert not answer.done(), "answered before its record was durable"
        reply = answer.result(30)
    assert reply.status_code == 200, reply.text
    assert not in_activation_log(two_workers, reply.json()["activationId"])
    record = http.get(two_workers.api(f"activations/{reply.json()['activationId']}")).json()
    assert record["response"]["result"] == {"n": 8}


def test_workers_are_free_while_records_wait_for_the_database(two_workers: RunningGateway) -> None:
    """Three times as many blocking invokes as workers all run and are answered while no commit gets through."""
    sessions = [two_workers.session() for _ in range(3 * WORKERS)]
    invoker = two_workers.service.invoker
    writer = two_workers.service.activations._writer  # type: ignore[attr-defined]
    with ThreadPoolExecutor(len(sessions)) as pool:
        with commits_held(two_workers):
            answers = [pool.submit(s.post, two_workers.api("actions/echo?blocking=true"), json={"n": i}, timeout=60)
                       for i, s in enumerate(sessions)]
            replies = [a.result(30) for a in answers]
            wait_for(lambda: invoker.load() == (0, 0), timeout=10, what="the workers to be free")
            assert len(writer._records) == len(sessions)  # all ran, none committed
    assert [r.status_code for r in replies] == [200] * len(sessions)
    assert sorted(r.json()["response"]["result"]["n"] for r in replies) == list(range(len(sessions)))


def test_while_the_database_is_behind_new_invokes_are_refused_at_once_and_taken_ones_are_recorded(
        two_workers: RunningGateway) -> None:
    http = two_workers.session()
    writer = two_workers.service.activations._writer  # type: ignore[attr-defined]
    bound = writer._max_pending
    writer.flush(30)  # the writer gathers records for a few ms before it commits: none is queued now
    with commits_held(two_workers):
        writer._max_pending = 1  # one record waiting for the database puts the store behind
        try:
            taken = http.post(two_workers.api("actions/echo"), json={"n": 9}, timeout=30)
            assert taken.status_code == 202, taken.text
            wait_for(lambda: len(writer._records) == 1, timeout=30, what="its record to wait for the database")
            started = time.monotonic()
            refused = [http.post(two_workers.api(f"actions/echo?blocking={blocking}"), json={"n": 10}, timeout=30)
                       for blocking in ("false", "true")]
            assert time.monotonic() - started < 1.5  # no wait for room
        finally:
            writer._max_pending = bound
    for answer in refused:
        assert answer.status_code == 503, answer.text
        body = answer.json()
        assert set(body) == {"error", "code"} and "behind" in body["error"]
    writer.flush(30)
    stored = http.get(two_workers.api(f"activations/{taken.json()['activationId']}"))  # from the database
    assert stored.json()["response"]["result"] == {"n": 9}


@contextmanager
def small_disk(path, megabytes: int) -> Iterator[Path]:
    """A tmpfs of ``megabytes`` mounted at ``path`` (a disk that can fill up), unmounted after."""
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(disk: Path) -> Path:
    """Write a file on ``disk`` until it is full; the file (delete it to free the disk)."""
    filler = disk / "filler"
    with filler.open("wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def test_a_blocking_invoke_on_a_full_disk_gets_503_not_a_202_promising_a_record(tmp_path, caplog) -> None:
    """Past the blocking wait, a 202 says the activation will be recorded: without a journal entry (the
    disk is full) this gateway could not keep that promise, so the caller gets a 503 naming it."""
    with small_disk(tmp_path / "disk", 48) as disk:
        server, running = start_gateway(disk / "data")
        try:
            http = running.session()
            sleeper = {"exec": {"kind": "python:3", "code": "import time\ndef main(a):\n    time.sleep(a['s'])\n"
                                                          "    return {'slept': a['s']}\n"}}
            assert http.put(running.api("actions/sleeper"), json=sleeper).ok
            assert http.post(running.api("actions/sleeper?blocking=true"), json={"s": 0}).status_code == 200  # warm
            filler = fill(disk)
            # the activation log's last page still has room: non-blocking invokes (journalled before
            # their 202) take it until the log cannot grow and they get 503
            wait_for(lambda: http.post(running.api("actions/sleeper"), json={"s": 0}).status_code == 503,
                     what="a full activation log")
            reply = http.post(running.api("actions/sleeper?blocking=true&timeout=1000"), json={"s": 3}, timeout=30)
            assert reply.status_code == 503, reply.text
            assert "may not be recorded" in reply.json()["error"] and reply.headers["x-openwhisk-activation-id"]
            filler.unlink()
            later = http.post(running.api("actions/sleeper?blocking=true&timeout=1000"), json={"s": 3}, timeout=30)
            assert later.status_code == 202  # with room again, it is journalled: 202 and a record later
            record = running.wait_record(http, later.json()["activationId"])
            assert record["response"]["result"] == {"slept": 3}
            failures = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
            assert not [m for m in failures if "cannot rollback" in m], failures  # the disk's own error, not a mask
        finally:
            server.stop()
