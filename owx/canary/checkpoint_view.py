"""The core's view of the checkpoint store: what a function has checkpointed, for the
``checkpoint_info`` table and the activation record; and clean-up after success.

The checkpoints themselves are written and restored by the action (the checkpoint API);
the core only reads their metadata. Each namespace has its own store; one the core cannot
open is retried every few seconds and reported as a warning on the functions that needed it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from owx.canary.checkpoint import CheckpointError, CheckpointStore
from owx.canary.function import Function
from owx.canary.store_worker import StoreWorker
from owx.canary.tables import CheckpointInfo, CoreTables, now_ms

log = logging.getLogger(__name__)
STORE_RETRY_S = 5.0
StoreReader = CheckpointStore | StoreWorker  # what the core needs of a store: history and delete


class CheckpointView:
    """Reads checkpoint metadata of functions from their namespace's store (``open_store(namespace)``)."""

    def __init__(self, open_store: Callable[[str], StoreReader], tables: CoreTables) -> None:
        self.open_store = open_store
        self.tables = tables
        self._errors: dict[str, tuple[str, float]] = {}  # by namespace: the last failure and when
        self._lock = threading.Lock()

    def latest(self, function: Function) -> int | None:
        """The sequence number of the function's newest checkpoint (recorded in ``checkpoint_info``)."""
        store = self._open(function)
        if store is None:
            return None
        try:
            history = store.history(function.function_id)
        except CheckpointError as exc:
            function.warnings.append(f"cannot read the checkpoints of {function.function_id}: {exc}")
            return None
        latest = history[0] if history else None
        self.tables.put(function.namespace, CheckpointInfo(
            function_id=function.function_id, job_id=function.job_id,
            latest_seq=latest.seq if latest else None, latest_state=latest.state if latest else None,
            latest_size=latest.size if latest else None, latest_time=latest.timestamp if latest else None,
            kept=[info.seq for info in history], restored=function.restored, updated=now_ms()))
        return latest.seq if latest else None

    def finished(self, function: Function, succeeded: bool) -> None:
        """Record the last checkpoints; drop them once the function succeeded for good."""
        self.latest(function)
        store = self._open(function)
        if store is not None and succeeded:
            try:
                store.delete(function.function_id)
            except (CheckpointError, OSError) as exc:
                log.warning("could not delete checkpoints of %s: %s", function.function_id, exc)

    def _open(self, function: Function) -> StoreReader | None:
        namespace = function.namespace
        with self._lock:
            error, tried = self._errors.get(namespace, (None, 0.0))
            if error is not None and time.monotonic() - tried < STORE_RETRY_S:
                function.warnings.append(f"checkpoint store unavailable to the core: {error}")
                return None
        try:
            store = self.open_store(namespace)
        except CheckpointError as exc:
            with self._lock:
                self._errors[namespace] = (str(exc), time.monotonic())
            function.warnings.append(f"checkpoint store unavailable to the core: {exc}")
            return None
        with self._lock:
            self._errors.pop(namespace, None)
        return store
