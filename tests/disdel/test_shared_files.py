"""Files in a job's shared directory are replaced by a retried action, which runs as another uid than
the attempt it replaces (real processes under two uids, as the sandbox gives them)."""

from __future__ import annotations

import os
import shutil
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from owx.disdel import weights
from owx.disdel.shared_files import write_shared

pytestmark = pytest.mark.root
FIRST_UID, RETRY_UID, NAMESPACE_GID = 61001, 61002, 61000  # two attempts, one namespace


def _as(uid: int, work: Callable[[], object]) -> str:
    """Run ``work`` in a forked process under ``uid`` and the namespace's gid; its traceback, or ''."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to the attempt's uid, run, report
        os.close(read)
        status = 0
        try:
            os.setgroups([])
            os.setgid(NAMESPACE_GID)
            os.setuid(uid)
            work()
        except BaseException:  # noqa: BLE001 - reported to the parent
            os.write(write, traceback.format_exc().encode())
            status = 1
        os._exit(status)
    os.close(write)
    with os.fdopen(read, "rb") as report:
        failure = report.read().decode()
    os.waitpid(pid, 0)
    return failure


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory as a job's are made (:class:`owx.disdel.state.JobPaths`), where any uid may reach it
    (pytest's own temporary directories are root's alone)."""
    root = Path(tempfile.mkdtemp(prefix="owx-shared-files-", dir="/tmp"))
    os.chmod(root, 0o755)
    directory = root / "models"
    directory.mkdir()
    os.chmod(directory, 0o777)
    yield directory
    shutil.rmtree(root)


@pytest.mark.parametrize("mode", [0o664, 0o644])
def test_a_retry_replaces_the_file_an_earlier_attempt_of_another_uid_left(shared: Path, mode: int):
    """The first attempt saved the final model and was killed before anything else (the file's mode as
    its umask made it); the retry, another uid of the same namespace, saves it again (as Keras' save:
    in place, at the path it is given) and every reader sees the retry's."""
    target = shared / "final.keras"

    def killed_attempt() -> None:
        target.write_bytes(b"first")
        os.chmod(target, mode)

    assert _as(FIRST_UID, killed_attempt) == ""
    assert _as(RETRY_UID, lambda: write_shared(target, lambda path: path.write_bytes(b"retry"))) == ""
    assert target.stat().st_uid == RETRY_UID and target.stat().st_mode & 0o777 == 0o644
    assert target.read_bytes() == b"retry"
    assert sorted(p.name for p in shared.iterdir()) == ["final.keras"]  # no temporary file left


def test_a_retry_writes_weights_where_a_killed_attempt_of_another_uid_was_cut_off(shared: Path):
    """The first attempt was killed while it wrote its weights: what it wrote stays, its own; the
    retry's weights are written whole."""
    target = shared / "w.npz"

    def killed_attempt() -> None:
        weights.save(target, [np.zeros(3)])

        def cut_off(path: Path) -> None:
            path.write_bytes(b"half an archive")
            os.chmod(path, 0o644)
            os._exit(0)  # killed here, before the rename

        write_shared(target, cut_off)

    assert _as(FIRST_UID, killed_attempt) == ""
    assert _as(RETRY_UID, lambda: weights.save(target, [np.ones(3)])) == ""
    assert np.array_equal(weights.load(target)[0], np.ones(3))


def test_a_failed_write_leaves_neither_a_temporary_file_nor_a_changed_target(shared: Path):
    target = shared / "w.npz"
    weights.save(target, [np.zeros(2)])

    class Unsavable:
        def __array__(self, *args, **kwargs):
            raise RuntimeError("cannot be written")

    with pytest.raises(RuntimeError):
        weights.save(target, [Unsavable()])  # type: ignore[list-item]
    assert sorted(p.name for p in shared.iterdir()) == ["w.npz"]
    assert np.array_equal(weights.load(target)[0], np.zeros(2))
