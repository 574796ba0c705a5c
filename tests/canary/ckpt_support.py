"""Fixtures and helpers of the checkpoint tests: a real redis-server, store URLs per backend."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from owx.bench.canary.redis_server import RedisServer as PasswordRedis
from owx.canary.checkpoint import CheckpointStore, open_checkpoint_store

IGNITE_ENV = "OWX_TEST_IGNITE"
BACKENDS = ["sqlite", "redis", pytest.param("ignite", marks=pytest.mark.ignite)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    """A private redis-server on a free port, with its own directory (RDB saved on stop)."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed (apt-get install redis-server); the checkpoint tests need it")
        self.binary = binary
        self.workdir = workdir
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir),
             "--save", "3600 1", "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"redis-server exited with {self.proc.returncode} on port {self.port}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.02)
        pytest.fail(f"redis-server did not answer on port {self.port}")

    def stop(self) -> None:
        """SIGTERM: redis-server saves its RDB and exits."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    workdir = Path(tempfile.mkdtemp(prefix="owx-ckpt-redis-"))
    server = RedisServer(workdir).start()
    yield server
    server.stop()
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def password_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PasswordRedis]:
    """A redis-server that wants a password (owx then makes a user per namespace)."""
    started = PasswordRedis(Path(tmp_path_factory.mktemp("redis")), password=secrets.token_hex(16))
    yield started
    started.stop()


StoreURL = Callable[..., str]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def store_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> StoreURL:
    """A factory of URLs of a fresh store of ``backend`` (own keys, own directories)."""
    tag = uuid.uuid4().hex[:12]

    def make(**options: object) -> str:
        query = {"blobs": str(tmp_path / "blobs"), **{k: str(v) for k, v in options.items()}}
        if backend == "sqlite":
            return f"sqlite:///{tmp_path}/checkpoints.db?{urlencode(query)}"
        if backend == "redis":
            server = request.getfixturevalue("redis_server")
            return f"{server.url}?{urlencode({'prefix': f'owx-test:{tag}:', **query})}"
        return f"ignite://{os.environ[IGNITE_ENV]}?{urlencode({'cache': 'owx-test-checkpoints', **query})}"

    return make


@pytest.fixture
def open_store(store_url: StoreURL) -> Iterator[Callable[..., CheckpointStore]]:
    """Open stores of the backend under test; all are closed after the test."""
    opened: list[CheckpointStore] = []

    def make(**options: object) -> CheckpointStore:
        store = open_checkpoint_store(store_url(**options))
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close(timeout=5)


def kv_keys(store: CheckpointStore) -> set[str]:
    """Every key the store's KV tier holds (inspects the backend's client)."""
    from owx.canary.checkpoint.kv_redis import RedisKV
    from owx.canary.checkpoint.kv_sqlite import SqliteKV

    kv = store.kv
    if isinstance(kv, SqliteKV):
        return {row[0] for row in kv._conn().execute("SELECT key FROM checkpoint_kv")}
    if isinstance(kv, RedisKV):
        prefix = store.options.prefix
        return {k.decode().removeprefix(prefix) for k in kv._redis.scan_iter(match=prefix + "*")}
    return {key for key, _ in kv._cache.scan()}


def segment_files(store: CheckpointStore, function_id: str) -> dict[str, set[str]]:
    """Names of the files (segments and leftovers) of one function, by tier (blob, spool)."""
    from owx.canary.checkpoint.files import function_dir

    found: dict[str, set[str]] = {}
    for tier, files in (("blob", store.segments.blobs), ("spool", store.segments.spool)):
        directory = files.root / function_dir(function_id)
        found[tier] = set(os.listdir(directory)) if directory.exists() else set()
    return found


def function_keys(store: CheckpointStore, function_id: str) -> set[str]:
    """The KV keys of one function (function IDs in tests contain no slash)."""
    return {k for k in kv_keys(store) if k.split("/")[1] == function_id}


def seg(seq: int) -> str:
    return f"{seq:012d}.seg"
