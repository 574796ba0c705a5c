"""The four stateful workloads of ``owx bench canary``, as action source code.

Each action checkpoints through the Canary API (the iterative solver implicitly, the
others explicitly at state boundaries), writes its container's id (its hostname) to
``<dir>/pids/<activation id>`` so the fault injector can find it, and returns a result that depends only on its
parameters — so a resumed execution must give exactly the failure-free answer.

* ``solver``      Jacobi iterations on a diagonally dominant linear system (NumPy);
* ``webservice``  a sequence of idempotent queries against a SQLite database;
* ``compress``    zlib compression of generated text files, chunk by chunk;
* ``bfs``         breadth-first searches from two sources over a generated random graph
                  (input file made by :func:`make_graph` on the shared directory), level by level.

Each runs for about a second of CPU here (two under the bench's load): long enough that a
failure costs a restart real work, as for the long-running functions Canary is for.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

PID_FILE = '''
import os, time
try:
    import redis  # noqa: F401  the checkpoint store's client, loaded at /init: a replica takes over at once
except ImportError:
    pass

def _pid_file(directory):
    return os.path.join(directory, "pids", os.environ.get("__OW_ACTIVATION_ID", "local"))

def _announce(directory):
    path = _pid_file(directory)
    tmp = "%s.%s.tmp" % (path, os.uname().nodename)
    with open(tmp, "w") as out:
        out.write(os.uname().nodename)  # the container id: the injector kills its cgroup
    os.replace(tmp, path)

def _resumed(ckpt):
    """When this execution took up the work, and the time of the checkpoint it took it up from."""
    return {"resumed_time": time.time(), "restored_time": ckpt.restored.timestamp if ckpt.restored else None}

def _pacer(ckpt):
    """Explicit checkpoints at state boundaries, at most one per checkpoint interval and at
    most a tenth of the time spent saving: ``maybe(state, values)`` saves ``values()`` if due."""
    next_at = [time.monotonic() + ckpt.interval_s]

    def maybe(name, values):
        now = time.monotonic()
        if now < next_at[0]:
            return
        ckpt.save(name, **values())
        done = time.monotonic()
        next_at[0] = done + max(ckpt.interval_s, 9 * (done - now))
    return maybe

def _done(directory, result):
    try:
        os.unlink(_pid_file(directory))  # the injector must not kill the container's next activation
    except FileNotFoundError:
        pass
    return result
'''

SOLVER = PID_FILE + '''
import numpy as np
from owx.canary.checkpoint import Checkpointer

def main(args):
    _announce(args["dir"])
    n, iterations, seed = args.get("n", 400), args.get("iterations", 40000), args["seed"]
    rng = np.random.default_rng(seed)
    a = rng.random((n, n))
    a[np.diag_indices(n)] = a.sum(axis=1) + 1.0
    b = rng.random(n)
    d = np.diag(a).copy()
    r = a - np.diag(d)
    with Checkpointer.from_env() as ckpt:
        restored = ckpt.restore()
        timing = _resumed(ckpt)
        state = restored["state"] if restored else {"k": 0, "x": np.zeros(n)}
        ckpt.register("state", state)
        ckpt.start_auto()
        while state["k"] < iterations:
            x = (b - r @ state["x"]) / d
            with ckpt.lock:
                state["x"], state["k"] = x, state["k"] + 1
        ckpt.stop_auto()
    residual = float(np.linalg.norm(a @ state["x"] - b))
    return _done(args["dir"], {"checksum": round(float(state["x"].sum()), 9), "residual": round(residual, 12),
                               "resumed": restored["state"]["k"] if restored else 0, **timing})
'''

WEBSERVICE = PID_FILE + '''
import os, random, sqlite3
from owx.canary.checkpoint import Checkpointer

def main(args):
    _announce(args["dir"])
    # every container has its own uid: a recovery elsewhere writes through the namespace's group;
    # SQLite gives its -wal and -shm files the database file's mode
    path = os.path.join(args["dir"], "shop-%s.db" % args["key"])
    os.umask(0o002)
    os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o664))
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")
    db.execute("CREATE TABLE IF NOT EXISTS orders (step INTEGER PRIMARY KEY, item INTEGER, qty INTEGER, price REAL)")
    db.execute("CREATE TABLE IF NOT EXISTS stock (item INTEGER PRIMARY KEY, sold INTEGER)")
    requests, seed = args.get("requests", 3200), args["seed"]
    with Checkpointer.from_env() as ckpt:
        state = ckpt.restore() or {"step": 0, "digest": 0, "revenue": 0.0}
        resumed, timing, checkpoint = state["step"], _resumed(ckpt), _pacer(ckpt)
        while state["step"] < requests:
            step = state["step"]
            rng = random.Random(seed * 100003 + step)
            item, qty, price = rng.randrange(50), rng.randrange(1, 5), round(rng.uniform(1, 100), 2)
            db.execute("BEGIN")
            db.execute("INSERT OR REPLACE INTO orders VALUES (?, ?, ?, ?)", (step, item, qty, price))
            sold = db.execute("SELECT COALESCE(SUM(qty), 0) FROM orders WHERE item = ? AND step <= ?",
                              (item, step)).fetchone()[0]
            db.execute("INSERT OR REPLACE INTO stock VALUES (?, ?)", (item, sold))
            top = db.execute("SELECT item FROM orders WHERE step <= ? GROUP BY item ORDER BY SUM(qty * price) DESC, "
                             "item LIMIT 1", (step,)).fetchone()[0]
            db.execute("COMMIT")
            state["digest"] = (state["digest"] * 31 + sold * 7 + top) % 1000000007
            state["revenue"] = round(state["revenue"] + qty * price, 2)
            state["step"] = step + 1
            checkpoint("request-%d" % state["step"], lambda: state)
    db.close()
    return _done(args["dir"], {"digest": state["digest"], "revenue": state["revenue"], "resumed": resumed, **timing})
'''

COMPRESS = PID_FILE + '''
import random, zlib
from owx.canary.checkpoint import Checkpointer

WORDS = ["owx", "canary", "function", "state", "replica", "checkpoint", "node", "graph", "solver", "request",
         "memory", "cgroup", "failure", "recovery", "latency", "throughput", "zlib", "stream", "block", "commit"]

def main(args):
    _announce(args["dir"])
    files, size, seed = args.get("files", 120), args.get("size", 96 * 1024), args["seed"]
    with Checkpointer.from_env() as ckpt:
        state = ckpt.restore() or {"file": 0, "out": 0, "crc": 0}
        resumed, timing, checkpoint = state["file"], _resumed(ckpt), _pacer(ckpt)
        while state["file"] < files:
            rng = random.Random(seed * 7919 + state["file"])
            text = " ".join(rng.choices(WORDS, k=size // 7)).encode()
            packed = zlib.compress(text, 9)
            state["out"] += len(packed)
            state["crc"] = zlib.crc32(packed, state["crc"])
            state["file"] += 1
            checkpoint("file-%d" % state["file"], lambda: state)
    return _done(args["dir"], {"out": state["out"], "crc": state["crc"], "resumed": resumed, **timing})
'''

BFS = PID_FILE + '''
import numpy as np
from owx.canary.checkpoint import Checkpointer

def _ints(values):
    return values.tolist() if isinstance(values, np.ndarray) else list(values)

def _search(source, n):
    return {"depth": 0, "frontier": [source], "pos": 0, "following": [], "seen": bytearray(n), "reached": 1}

def main(args):
    _announce(args["dir"])
    with np.load(os.path.join(args["dir"], "graph-%d.npz" % args["seed"])) as graph:  # the input, on shared storage
        targets, starts = graph["targets"].tolist(), graph["starts"].tolist()
    n = len(starts) - 1
    sources = args.get("sources", [0, n // 2])
    with Checkpointer.from_env() as ckpt:
        state = ckpt.restore() or {"source": 0, "sum": 0, **_search(sources[0], n)}
        resumed, timing, checkpoint = (state["source"], state["depth"]), _resumed(ckpt), _pacer(ckpt)
        while state["source"] < len(sources):
            frontier, following = (_ints(state["frontier"]), _ints(state["following"]))  # saved as int32 arrays
            seen, pos = state["seen"], state["pos"]
            seen[sources[state["source"]]] = 1
            while frontier:
                for index in range(pos, len(frontier)):
                    v = frontier[index]
                    for w in targets[starts[v]:starts[v + 1]]:
                        if not seen[w]:
                            seen[w] = 1
                            following.append(w)
                    if index % 256 == 255:
                        checkpoint("source-%d-level-%d" % (state["source"], state["depth"]), lambda: {
                            **state, "pos": index + 1, "frontier": np.asarray(frontier, np.int32),
                            "following": np.asarray(following, np.int32)})
                state["depth"] += 1
                state["reached"] += len(following)
                state["sum"] = (state["sum"] * 31 + state["depth"] * len(following)) % 1000000007
                frontier, following, pos = following, [], 0
            state["sum"] = (state["sum"] * 31 + state["reached"]) % 1000000007
            state["source"] += 1
            if state["source"] < len(sources):
                state.update(_search(sources[state["source"]], n))
    return _done(args["dir"], {"sources": len(sources), "sum": state["sum"], "resumed": resumed, **timing})
'''


def make_graph(directory: Path, seed: int, nodes: int = 300_000, degree: int = 4) -> None:
    """The BFS input: a random directed graph in CSR form (``graph-<seed>.npz``), world-readable."""
    import numpy as np

    rng = np.random.default_rng(seed)
    src = rng.integers(0, nodes, nodes * degree)
    dst = rng.integers(0, nodes, nodes * degree)
    order = np.argsort(src, kind="stable")
    path = directory / f"graph-{seed}.npz"
    np.savez(path, targets=dst[order].astype(np.int32),
             starts=np.searchsorted(src[order], np.arange(nodes + 1)).astype(np.int32))
    path.chmod(0o644)


WORKLOADS: dict[str, str] = {"solver": SOLVER, "webservice": WEBSERVICE, "compress": COMPRESS, "bfs": BFS}
CHECKPOINT_MODE = {"solver": "implicit", "webservice": "explicit", "compress": "explicit", "bfs": "explicit"}


def expected(workload: str, params: dict[str, Any]) -> dict[str, Any]:
    """The failure-free answer, computed here by the same code without a checkpoint store."""
    namespace: dict[str, Any] = {}
    exec(compile(WORKLOADS[workload], f"<{workload}>", "exec"), namespace)
    with contextlib.redirect_stderr(io.StringIO()):
        result = namespace["main"](dict(params))
    return answer(result)


PROGRESS = ("resumed", "resumed_time", "restored_time")


def answer(result: dict[str, Any]) -> dict[str, Any]:
    """The part of an action's result that must equal :func:`expected` (not how it got there)."""
    return {k: v for k, v in result.items() if k not in PROGRESS}
