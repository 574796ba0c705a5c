"""A namespace's checkpoint store, opened for the gateway by a process with that namespace's rights.

The default store (and the blob tier of a Redis store with a user per namespace) lives in the
namespace's directory, which that namespace's actions write: its files and links are theirs to
shape. A root process that opened them would follow a link an action planted anywhere on the host
(SQLite writing its ``-wal`` file, a spool listed and cleaned, a directory made and chmod-ed), so
the gateway never does: for each such namespace it starts this module as a process of the
namespace's group and a uid of its own (:meth:`owx.platform.Platform.namespace_identity`), which
makes the store's directories and serves the two things the gateway needs of the store, a
function's checkpoint history and its deletion, one JSON line each way over its pipes. It reaches
what the namespace's actions reach, and no more.

The worker starts as root (the interpreter may live where only root reads, as under /root), imports
what it needs, shows the namespace's directory (its working directory, set by the gateway) at
``/tmp/namespace`` in a mount namespace of its own (the data dir above it is closed to all but root,
and SQLite opens files by their full path), and only then, before it touches anything of the
namespace's, becomes that uid and group, with no other group and no capability. It runs outside the
containers' cgroups, so its address space is bounded (``MAX_ADDRESS_SPACE``): an index the namespace
wrote to be huge fails that namespace's request (MemoryError), not the host.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import select
import subprocess
import sys
import threading
from dataclasses import asdict
from pathlib import Path
from urllib.parse import urlsplit

from owx.canary.checkpoint import CheckpointError, open_checkpoint_store
from owx.canary.checkpoint.model import BlobRef, CheckpointInfo
from owx.runtimes import kernel

ANSWER_WAIT_S = 30.0  # a store that takes longer is treated as hung: the worker is ended
MAX_ANSWER_BYTES = 16 * 1024 * 1024
MAX_ADDRESS_SPACE = 2 * 1024 * 1024 * 1024  # what a worker may map: a tenant's data cannot make it take the host's memory
DB_NAME = "checkpoints.db"
ENV_URL = "OWX_STORE_WORKER_URL"
NICE = 10  # it runs outside the containers' cgroups: what a namespace's data costs it yields to the rest
DIRECTORY_MODE = 0o2770  # the namespace's group reads and writes; new files keep the group
FILE_MODE = 0o660
HERE = "/tmp/namespace"  # where the worker sees the namespace's directory
# what the store at a URL of each scheme imports: its tier and its client library (imported lazily by
# the tier, and unreadable once the worker is not root when the interpreter's packages are root's)
KV_MODULES = {"sqlite": ("owx.canary.checkpoint.kv_sqlite", "sqlite3"),
              "redis": ("owx.canary.checkpoint.kv_redis", "redis", "encodings.idna"),
              "rediss": ("owx.canary.checkpoint.kv_redis", "redis", "encodings.idna", "ssl"),
              "ignite": ("owx.canary.checkpoint.kv_ignite", "pyignite", "pyignite.datatypes")}


class StoreWorker:
    """The gateway's side: one worker process for the store at ``url`` inside ``directory``."""

    def __init__(self, url: str, directory: Path, store_dir: Path, identity: tuple[int, int]) -> None:
        uid, gid = identity
        inside = url.replace(str(directory), HERE)
        made = str(store_dir).replace(str(directory), HERE)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": os.pathsep.join(sys.path),
               ENV_URL: inside}  # not argv: ps shows it, and it holds the namespace's password
        self._process = subprocess.Popen(
            [sys.executable, "-m", __name__, made, str(uid), str(gid)], cwd=directory, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        self._lock = threading.Lock()
        try:
            self._ask({"op": "ready"})  # the directories are made, the store opened
        except CheckpointError:
            self.close(timeout=0)
            raise

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def history(self, function_id: str) -> list[CheckpointInfo]:
        """Metadata of the function's retained checkpoints, newest first."""
        items = self._ask({"op": "history", "function_id": function_id})
        try:
            return [_info(item) for item in items]
        except (TypeError, KeyError) as exc:
            raise CheckpointError(f"the namespace's checkpoint store worker answered nonsense: {exc}") from None

    def delete(self, function_id: str) -> None:
        """Remove every checkpoint of the function."""
        self._ask({"op": "delete", "function_id": function_id})

    def close(self, timeout: float | None = 10.0) -> bool:
        """End the worker (it flushes and closes the store when its input ends)."""
        try:
            self._process.stdin.close()
            self._process.wait(timeout)
            return True
        except (OSError, subprocess.TimeoutExpired):
            self._process.kill()
            self._process.wait()
            return False

    def _ask(self, request: dict) -> object:
        with self._lock:
            try:
                self._process.stdin.write(json.dumps(request).encode() + b"\n")
                self._process.stdin.flush()
                ready, _, _ = select.select([self._process.stdout], [], [], ANSWER_WAIT_S)
                line = self._process.stdout.readline(MAX_ANSWER_BYTES) if ready else b""
            except OSError as exc:
                line = b""
                reason = str(exc)
            else:
                reason = "it did not answer" if not ready else "it ended, or its answer is too long"
            if not line.endswith(b"\n"):
                self._process.kill()
                raise CheckpointError(f"the namespace's checkpoint store worker failed: {reason}")
        try:
            answer = json.loads(line)
            if "error" in answer:
                raise CheckpointError(str(answer["error"]))
            return answer["ok"]
        except (ValueError, TypeError, KeyError) as exc:  # it answers what the namespace's data made it
            raise CheckpointError(f"the namespace's checkpoint store worker answered nonsense: {exc}") from None


def _info(item: dict) -> CheckpointInfo:
    return CheckpointInfo(item["function_id"], item["seq"], item["state"], item["timestamp"], item["size"],
                          tuple(item["inline"]), tuple(BlobRef(**ref) for ref in item["refs"]))


def make_store_directories(store_dir: Path, database: bool) -> None:
    """The store's directories, and with ``database`` an empty SQLite file (SQLite gives its ``-wal`` and
    ``-shm`` files the database file's mode), with the group's modes: where the caller may (root, or the
    worker on what it made); what a namespace's actions made there already stays theirs."""
    for path in (store_dir, store_dir / "blobs", store_dir / "blobs" / ".spool"):  # .spool: the staging area
        path.mkdir(parents=True, exist_ok=True)
        _chmod_if_allowed(path, DIRECTORY_MODE)
    if database:
        os.close(os.open(store_dir / DB_NAME, os.O_WRONLY | os.O_CREAT, FILE_MODE))
        _chmod_if_allowed(store_dir / DB_NAME, FILE_MODE)


def _chmod_if_allowed(path: Path, mode: int) -> None:
    try:
        path.chmod(mode)
    except PermissionError:
        pass  # not the caller's: the namespace's own, as it made it


def become(uid: int, gid: int, url: str) -> None:
    """Import the store's client for ``url`` while still root, show the working directory at ``HERE``,
    then take ``uid`` and ``gid`` for good."""
    for module in KV_MODULES[urlsplit(url).scheme]:
        importlib.import_module(module)
    kernel.unshare(kernel.CLONE_NEWNS)
    kernel.mount(None, "/", None, kernel.MS_REC | kernel.MS_PRIVATE)
    view = os.path.dirname(HERE)
    kernel.mount("tmpfs", view, "tmpfs", kernel.MS_NOSUID | kernel.MS_NODEV, "size=1m,mode=1777")
    os.mkdir(HERE)
    kernel.mount(".", HERE, None, kernel.MS_BIND)
    os.chdir(HERE)
    resource.setrlimit(resource.RLIMIT_AS, (MAX_ADDRESS_SPACE, MAX_ADDRESS_SPACE))  # runs outside any cgroup
    os.nice(NICE)
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)  # from root to another uid for real, effective and saved: every capability goes


def serve(url: str, store_dir: str) -> None:
    """The worker's side: make the directories, open the store, answer requests until input ends."""
    os.umask(0o007)
    try:
        make_store_directories(Path(store_dir), database=url.startswith("sqlite:"))
        store = open_checkpoint_store(url)
    except (OSError, CheckpointError) as exc:
        error = f"cannot open the namespace's checkpoint store: {exc}"
        for _ in sys.stdin.buffer:
            _answer({"error": error})
        return
    try:
        for line in sys.stdin.buffer:
            request = json.loads(line)
            try:
                if request["op"] == "history":
                    _answer({"ok": [asdict(info) for info in store.history(request["function_id"])]})
                elif request["op"] == "delete":
                    store.delete(request["function_id"])
                    _answer({"ok": None})
                else:
                    _answer({"ok": True})
            except (OSError, CheckpointError, MemoryError) as exc:  # MemoryError: what the namespace wrote
                _answer({"error": str(exc) or type(exc).__name__})
    finally:
        store.close()


def _answer(answer: dict) -> None:
    sys.stdout.buffer.write(json.dumps(answer).encode() + b"\n")
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    become(int(sys.argv[2]), int(sys.argv[3]), os.environ[ENV_URL])
    serve(os.environ[ENV_URL], sys.argv[1])
