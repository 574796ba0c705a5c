"""10 MB checkpoint write and restore latency on a checkpoint store (goal: ≤ 50 ms each).

Imported by ``owx bench canary`` (:func:`measure_checkpoint_latency`); also runs alone::

    python -m owx.bench.canary.checkpoint [--url sqlite:///...] [--size-mb 10] [--repeats 30]

Measured per payload (raw ``bytes``, a float32 NumPy array):

- write: ``CheckpointStore.save`` until it returns (the checkpoint is published);
- restore: ``latest()`` right after the save (data still staged);
- restore (flushed): ``latest()`` once the flusher moved the data to the blob tier.

Baseline, same run and machine: writing the payload to a file atomically (temporary file
and rename, page cache, no fsync) and reading it back — the cost floor of any store.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from owx.canary.checkpoint import open_checkpoint_store

GOAL_MS = 50.0


@dataclass(frozen=True)
class Latency:
    """Milliseconds of one operation over the repeats."""

    samples: tuple[float, ...]

    @property
    def p50(self) -> float:
        return statistics.median(self.samples)

    @property
    def p99(self) -> float:
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


@dataclass(frozen=True)
class PayloadResult:
    payload: str
    write: Latency
    restore: Latency
    restore_flushed: Latency
    baseline_write: Latency
    baseline_read: Latency


def _timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return (time.perf_counter() - start) * 1000.0, result


def _payloads(size: int) -> dict[str, object]:
    rng = np.random.default_rng(0)
    return {"bytes": rng.bytes(size), "ndarray": rng.random(size // 4, dtype=np.float32)}


class _FileBaseline:
    """Write a payload to a file atomically and read it back: the floor of any store."""

    def __init__(self, directory: Path, data: memoryview) -> None:
        self.target = directory / "baseline.bin"
        self.data = data

    def write(self) -> None:
        tmp = self.target.with_suffix(".tmp")
        with open(tmp, "wb", buffering=0) as out:
            out.write(self.data)
        os.replace(tmp, self.target)

    def read(self) -> bytearray:
        buf = bytearray(self.data.nbytes)
        with open(self.target, "rb", buffering=0) as src:
            src.readinto(buf)
        return buf


def measure_checkpoint_latency(url: str | None = None, size: int = 10 * 1024 * 1024, repeats: int = 30) -> list[PayloadResult]:
    """Write/restore latency of a ``size``-byte checkpoint on the store at ``url``
    (default: a fresh embedded SQLite store in a temporary directory). Baseline and store
    operations alternate, so both see the same page-cache and CPU conditions."""
    with tempfile.TemporaryDirectory(prefix="owx-bench-ckpt-") as tmp:
        store = open_checkpoint_store(url or f"sqlite:///{tmp}/checkpoints.db?keep=3&history_s=0")
        results = []
        try:
            for name, value in _payloads(size).items():
                fid = f"bench-{name}-{uuid.uuid4().hex[:8]}"
                baseline = _FileBaseline(Path(tmp), memoryview(value).cast("B"))
                samples: dict[str, list[float]] = {k: [] for k in ("w", "r", "f", "bw", "br")}
                for k in range(repeats + 2):  # the first two warm up
                    bw, _ = _timed(baseline.write)
                    br, _ = _timed(baseline.read)
                    w, _ = _timed(partial(store.save, fid, f"step-{k}", {"step": k, "data": value}))
                    r, checkpoint = _timed(partial(store.latest, fid))
                    assert checkpoint.values["step"] == k
                    store.flush(30)
                    f, _ = _timed(partial(store.latest, fid))
                    if k >= 2:
                        for key, ms in (("w", w), ("r", r), ("f", f), ("bw", bw), ("br", br)):
                            samples[key].append(ms)
                store.delete(fid)
                lat = {key: Latency(tuple(ms)) for key, ms in samples.items()}
                results.append(PayloadResult(name, lat["w"], lat["r"], lat["f"], lat["bw"], lat["br"]))
        finally:
            store.close()
    return results


def report(results: list[PayloadResult], size: int) -> bool:
    """Print the figures and goal lines; True if every goal is met."""
    ok = True
    print(f"checkpoint of {size / 2**20:.0f} MB: p50 / p99 in ms (ratio of p50 to the file baseline)")
    for r in results:
        print(f"  {r.payload:8s} write            {r.write.p50:7.2f} / {r.write.p99:7.2f}  ({r.write.p50 / r.baseline_write.p50:.2f}x of file write {r.baseline_write.p50:.2f})")
        print(f"  {r.payload:8s} restore          {r.restore.p50:7.2f} / {r.restore.p99:7.2f}  ({r.restore.p50 / r.baseline_read.p50:.2f}x of file read {r.baseline_read.p50:.2f})")
        print(f"  {r.payload:8s} restore flushed  {r.restore_flushed.p50:7.2f} / {r.restore_flushed.p99:7.2f}  ({r.restore_flushed.p50 / r.baseline_read.p50:.2f}x)")
        for what, latency in (("write", r.write), ("restore", r.restore), ("restore flushed", r.restore_flushed)):
            passed = latency.p50 <= GOAL_MS
            ok &= passed
            print(f"  goal {r.payload} {what} p50 <= {GOAL_MS:.0f} ms: {'PASS' if passed else 'FAIL'} ({latency.p50:.2f} ms)")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="checkpoint store URL (default: a temporary embedded store)")
    parser.add_argument("--size-mb", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args(argv)
    size = int(args.size_mb * 2**20)
    return 0 if report(measure_checkpoint_latency(args.url, size, args.repeats), size) else 1


if __name__ == "__main__":
    sys.exit(main())
