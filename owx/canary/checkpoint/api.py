"""The checkpoint API used inside actions.

The runtime gives each activation of a checkpointed action two environment variables:
``__OW_CANARY_FUNCTION_ID`` (whose checkpoints) and ``__OW_CANARY_STORE`` (the store URL),
and optionally ``__OW_CANARY_INTERVAL`` (seconds between implicit checkpoints).

Explicit mode::

    with Checkpointer.from_env() as ckpt:
        state = ckpt.restore() or {"epoch": 0, "weights": init()}
        for epoch in range(state["epoch"], 50):
            state["weights"] = train(state["weights"])
            state["epoch"] = epoch + 1
            ckpt.save(f"epoch-{epoch + 1}", **state)

Implicit mode — register the critical data once, checkpoints happen in the background::

    with Checkpointer.from_env() as ckpt:
        state = (ckpt.restore() or {"state": {"i": 0, "total": 0}})["state"]
        ckpt.register("state", state)  # a mutable object: registered once, captured each time
        ckpt.start_auto(interval_s=1.0)
        while state["i"] < n:
            with ckpt.lock:            # optional: makes the update atomic w.r.t. snapshots
                state["total"] += f(state["i"]); state["i"] += 1

Mistakes in the calls (bad names, unserializable values, oversized state) raise
:class:`InvalidCheckpoint` / :class:`CheckpointTooLarge`. A store that cannot be reached
never fails the action: it runs on without checkpoints, and each problem becomes a
warning in :attr:`Checkpointer.warnings` and a line ``owx-canary-warning: ...`` on stderr
for the activation record. A failed save never touches the previous checkpoint.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Self, TextIO

from owx.canary.checkpoint.errors import (
    CheckpointError,
    CorruptCheckpoint,
    InvalidCheckpoint,
    StoreUnavailable,
)
from owx.canary.checkpoint.model import CheckpointInfo
from owx.canary.checkpoint.store import CheckpointStore, check_name, encode_values

ENV_FUNCTION_ID = "__OW_CANARY_FUNCTION_ID"
ENV_STORE = "__OW_CANARY_STORE"
ENV_INTERVAL = "__OW_CANARY_INTERVAL"
WARNING_PREFIX = "owx-canary-warning: "
DEFAULT_INTERVAL_S = 5.0

Snapshot = Callable[[], Mapping[str, Any]]

_open: weakref.WeakSet[Checkpointer] = weakref.WeakSet()


def close_all(timeout: float = 10.0) -> None:
    """Close every checkpointer of this process that is still open.

    For the runtime to call when an activation ends: a warm container outlives its
    activation, and implicit checkpoints must not continue into the next one. Mistakes
    the background threads hit were already reported as warnings; they are not raised.
    """
    for ckpt in list(_open):
        try:
            ckpt.close(timeout)
        except CheckpointError:
            pass


class Checkpointer:
    """Checkpoints of one function, from inside its action."""

    def __init__(
        self, function_id: str | None, store: CheckpointStore | None, *,
        interval_s: float = DEFAULT_INTERVAL_S, retry_s: float = 5.0, stderr: TextIO | None = None,
    ) -> None:
        self.function_id = function_id or ""
        self.store = store if function_id else None
        self.interval_s = interval_s
        self.retry_s = retry_s
        self.warnings: list[str] = []
        self.restored: CheckpointInfo | None = None
        self.last_saved: CheckpointInfo | None = None
        self.skipped = 0
        #: held while values are captured; hold it around updates that must land together
        self.lock = threading.RLock()
        self._stderr = stderr
        self._values: dict[str, Any] = {}
        self._write_lock = threading.Lock()
        self._ticket = 0
        self._saved_ticket = 0
        self._retry_at = 0.0
        self._failing = False
        self._auto: _AutoCheckpoint | None = None
        _open.add(self)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, stderr: TextIO | None = None) -> Checkpointer:
        """The checkpointer the runtime configured; without configuration or store,
        one that runs without checkpoints (with a warning)."""
        from owx.canary.checkpoint.url import open_checkpoint_store

        env = os.environ if environ is None else environ
        function_id, url = env.get(ENV_FUNCTION_ID), env.get(ENV_STORE)
        interval = _interval(env.get(ENV_INTERVAL))
        ckpt = cls(function_id, None, interval_s=interval or DEFAULT_INTERVAL_S, stderr=stderr)
        if env.get(ENV_INTERVAL) and interval is None:
            ckpt._warn(f"ignoring {ENV_INTERVAL}={env[ENV_INTERVAL]!r}: not a positive number of seconds")
        if not function_id or not url:
            ckpt._warn(f"checkpoints disabled: {ENV_FUNCTION_ID} and {ENV_STORE} are not both set")
            return ckpt
        try:
            ckpt.store = open_checkpoint_store(url, on_warning=ckpt._warn)
        except CheckpointError as exc:
            ckpt._warn(f"checkpoints disabled, running without them: cannot open the store: {exc}")
        return ckpt

    @property
    def enabled(self) -> bool:
        """Whether checkpoints are being written."""
        return self.store is not None

    # -- explicit mode ------------------------------------------------------------------

    def register(self, name: str, value: Any) -> None:
        """Make ``value`` critical data saved with every checkpoint under ``name``.

        Mutable objects (dicts, lists, arrays) are captured at each save, so registering
        them once is enough; re-register immutable ones when they change.
        """
        check_name("checkpoint value name", name)
        with self.lock:
            self._values[name] = value

    def unregister(self, name: str) -> None:
        with self.lock:
            self._values.pop(name, None)

    def save(self, state: str, /, **values: Any) -> CheckpointInfo | None:
        """Checkpoint the registered values, updated with ``values``, as state ``state``.

        Returns the checkpoint, or None if the store is unavailable (see :attr:`warnings`).
        """
        check_name("checkpoint state", state)
        return self._save(state, lambda: values)

    def restore(self) -> dict[str, Any] | None:
        """The values of the latest checkpoint (also registered for later saves), or None
        to start fresh. If the store cannot be read, checkpoints stay off for this
        activation, so the ones already stored are not superseded by a fresh start."""
        if self.store is None:
            return None
        try:
            checkpoint = self.store.latest(self.function_id)
        except (StoreUnavailable, CorruptCheckpoint) as exc:
            self._warn(f"cannot read the latest checkpoint, starting fresh with checkpoints disabled: {exc}")
            self._disable()
            return None
        if checkpoint is None:
            return None
        self.restored = checkpoint.info
        with self.lock:
            self._values.update(checkpoint.values)
        return dict(checkpoint.values)

    # -- implicit mode ------------------------------------------------------------------

    def start_auto(self, interval_s: float | None = None, snapshot: Snapshot | None = None, state: str = "auto") -> None:
        """Checkpoint in the background every ``interval_s`` seconds (default: the runtime's).

        Each checkpoint holds the registered values, updated with what ``snapshot()``
        returns if given. The first one is taken now, so mistakes raise here.
        """
        check_name("checkpoint state", state)
        interval = self.interval_s if interval_s is None else interval_s
        if not (isinstance(interval, (int, float)) and interval > 0):
            raise ValueError(f"checkpoint interval must be a positive number of seconds, got {interval!r}")
        if self._auto is not None:
            raise RuntimeError("automatic checkpoints are already running; call stop_auto() first")
        capture = snapshot or dict
        self._save(state, capture)
        self._auto = _AutoCheckpoint(self, interval, state, capture)

    def stop_auto(self) -> None:
        """Stop the background checkpoints; re-raises a mistake the background thread hit."""
        auto, self._auto = self._auto, None
        if auto is not None:
            auto.stop()
            if auto.error is not None:
                raise auto.error

    # -- lifecycle ----------------------------------------------------------------------

    def close(self, timeout: float = 10.0) -> None:
        """Stop background checkpoints, flush staged data (up to ``timeout``), disconnect."""
        _open.discard(self)
        try:
            self.stop_auto()
        finally:
            if self.store is not None:
                store, self.store = self.store, None
                if not store.close(timeout):
                    self._warn("some checkpoint data was not flushed to the blob tier; it stays readable in staging")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is None:
            self.close()
            return
        try:
            self.close()
        except CheckpointError:
            pass  # the action's own exception is the one to report

    # -- internals ----------------------------------------------------------------------

    def _save(self, state: str, capture: Snapshot) -> CheckpointInfo | None:
        """Capture and encode under :attr:`lock`, then write (skipped while the store is down)."""
        with self.lock:
            try:
                captured = capture()
            except Exception as exc:  # the user's snapshot function: report whatever it raised
                raise InvalidCheckpoint(f"the checkpoint snapshot function failed: {exc!r}") from exc
            if not isinstance(captured, Mapping):
                raise InvalidCheckpoint(f"the checkpoint snapshot must be a mapping of names to values, got {type(captured).__name__}")
            frames = encode_values({**self._values, **captured})
            self._ticket += 1
            ticket = self._ticket
        store = self.store
        if store is None:
            return None
        with self._write_lock:
            if ticket < self._saved_ticket:
                return None  # a newer capture is already saved
            if time.monotonic() < self._retry_at:
                self.skipped += 1
                return None
            try:
                info = store.save_frames(self.function_id, state, frames)
            except (StoreUnavailable, CorruptCheckpoint) as exc:
                if not self._failing:
                    self._warn(f"checkpoint {state!r} not saved, running on without it (the previous one is kept): {exc}")
                self._failing = True
                self.skipped += 1
                self._retry_at = time.monotonic() + self.retry_s
                return None
            if self._failing:
                self._warn(f"checkpoint store is reachable again; saved {state!r} after skipping {self.skipped}")
                self._failing = False
            self._saved_ticket = ticket
            self.last_saved = info
            return info

    def _disable(self) -> None:
        store, self.store = self.store, None
        if store is not None:
            try:
                store.close(timeout=0)
            except CheckpointError:
                pass

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        stream = self._stderr or sys.stderr
        print(WARNING_PREFIX + message, file=stream, flush=True)


class _AutoCheckpoint:
    """The background thread of implicit mode."""

    def __init__(self, owner: Checkpointer, interval: float, state: str, capture: Snapshot) -> None:
        self.error: CheckpointError | None = None
        self._owner = owner
        self._interval = interval
        self._state = state
        self._capture = capture
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="owx-checkpoint-auto", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._owner._save(self._state, self._capture)
            except CheckpointError as exc:
                self._owner._warn(f"automatic checkpoints stopped: {exc}")
                self.error = exc
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _interval(raw: str | None) -> float | None:
    try:
        value = float(raw) if raw else None
    except ValueError:
        return None
    return value if value is not None and value > 0 and value != float("inf") else None
