"""Checkpoint write and restore against a real redis-server, each from a fresh process.

A writer process opens the store (``redis://…?blobs=…``), saves one checkpoint of
``size`` bytes (a float32 NumPy array) and dies at once (``os._exit``, as a function
killed right after its checkpoint), so the data stays staged in Redis; a second, new
process (no client, connection or page of the first one) opens the store and restores
it. Timed inside each process: opening the store (a new connection) plus the operation —
what a recovering function pays; the modules are imported before, as the runtime's zygote
preloads them. Then the checkpoint is flushed to the blob tier and a third process
restores it from there (``restore flushed``). ``stage`` is the store's staging option
(``none``: large values go to the blob tier before the save returns — the KV tier off).

Run alone: ``python -m owx.bench.canary.cold_restore --size-mb 10 --repeats 20``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from owx.bench.canary.checkpoint import Latency
from owx.bench.canary.redis_server import RedisServer


def _child(operation: str, url: str, function_id: str, size: int) -> float:
    """In a fresh process: open the store, do ``operation``; milliseconds."""
    import numpy as np
    import redis  # noqa: F401  preloaded by the runtime's zygote, as the checkpoint package

    from owx.canary.checkpoint import open_checkpoint_store

    data = np.random.default_rng(0).random(size // 4, dtype=np.float32)
    started = time.perf_counter()
    store = open_checkpoint_store(url)
    if operation == "write":
        store.save(function_id, "bench", {"data": data})
    elif operation == "flush":
        store.latest(function_id)  # submits the staged segment to this process's flusher
        store.close(60)
    else:
        checkpoint = store.latest(function_id)
        if checkpoint is None or checkpoint.values["data"].nbytes != data.nbytes:
            raise SystemExit(f"restore of {function_id} returned {checkpoint!r}")
    return (time.perf_counter() - started) * 1000


def _spawn(operation: str, url: str, function_id: str, size: int) -> float:
    out = subprocess.run([sys.executable, "-m", "owx.bench.canary.cold_restore", "--child", operation,
                          "--url", url, "--function-id", function_id, "--size", str(size)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["ms"]


def measure(size: int, repeats: int, stage: str = "auto") -> dict[str, Latency]:
    """Cold write, restore (staged in Redis) and restore flushed (blob tier), ``repeats`` times each."""
    samples: dict[str, list[float]] = {"write": [], "restore": [], "restore flushed": []}
    with tempfile.TemporaryDirectory(prefix="owx-bench-cold-") as tmp:
        redis = RedisServer(Path(tmp) / "redis")
        url = f"{redis.url}?blobs={tmp}/blobs&stage={stage}"
        try:
            for _ in range(repeats):
                fid = f"cold-{uuid.uuid4().hex[:10]}"
                samples["write"].append(_spawn("write", url, fid, size))
                samples["restore"].append(_spawn("restore", url, fid, size))
                _spawn("flush", url, fid, size)
                samples["restore flushed"].append(_spawn("restore", url, fid, size))
        finally:
            redis.stop()
    return {name: Latency(tuple(ms)) for name, ms in samples.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--stage", default="auto", choices=("auto", "kv", "spool", "none"))
    parser.add_argument("--child", choices=("write", "restore", "flush"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--function-id", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps({"ms": _child(args.child, args.url, args.function_id, args.size)}), flush=True)
        os._exit(0)  # no flush, no goodbye to Redis: the next process finds what a dead function left
    for name, latency in measure(int(args.size_mb * 2**20), args.repeats, args.stage).items():
        print(f"{name:16s} p50 {latency.p50:7.2f} ms  p99 {latency.p99:7.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
