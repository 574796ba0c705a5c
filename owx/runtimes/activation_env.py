"""The ``__OW_*`` environment of an activation, per thread.

OpenWhisk hands the activation's metadata (``__OW_ACTIVATION_ID``,
``__OW_DEADLINE``, ...) to the action as environment variables. With
concurrency 1 that is plain ``os.environ``. With concurrency > 1 several
activations run at once in threads of one process, and a single process
environment cannot hold all of them, so:

* inside the thread running an activation, ``os.environ[...]``,
  ``os.environ.get``, ``os.getenv``, ``dict(os.environ)`` and friends read that
  activation's own values (a thread-local overlay on ``os.environ``);
* the process-wide environment (C ``environ``: subprocesses, threads the action
  starts itself, C extensions) holds the values of the most recently started
  activation, as in OpenWhisk's own runtimes.
"""

from __future__ import annotations

import json
import os
import threading
from contextlib import contextmanager

TYPE_CHECKING = False  # typing costs ~4 ms of start-up; only type checkers need it
if TYPE_CHECKING:
    from collections.abc import Iterator

OW_PREFIX = "__OW_"
_local = threading.local()
_process_env_lock = threading.Lock()


class _ActivationEnviron(os._Environ):  # type: ignore[name-defined,misc]
    """``os.environ`` whose reads see the current thread's activation values first."""

    def __getitem__(self, key: str) -> str:
        overlay = _local.__dict__.get("env")
        if overlay is not None and key in overlay:
            return overlay[key]
        return super().__getitem__(key)


def install() -> None:
    """Make ``os.environ`` activation-aware (same object, so every reference sees it)."""
    if type(os.environ) is os._Environ:  # type: ignore[attr-defined]
        os.environ.__class__ = _ActivationEnviron


@contextmanager
def activation_env(values: dict[str, str]) -> Iterator[None]:
    """Expose ``values`` as environment variables to the code run inside the block.

    ``__OW_*`` keys of an earlier activation that this one does not carry are removed,
    so a warm container never shows one activation's metadata to the next.
    """
    with _process_env_lock:
        for stale in [key for key in os.environ if key.startswith(OW_PREFIX) and key not in values]:
            del os.environ[stale]
        os.environ.update(values)
    _local.env = values
    try:
        yield
    finally:
        _local.env = None


def ow_env(message: dict[str, object]) -> dict[str, str]:
    """``__OW_<KEY>`` variables of a ``/run`` message: every key except ``value``.

    Strings are taken as they are, other values as JSON; ``null`` values are left out.
    """
    return {
        OW_PREFIX + key.upper(): value if isinstance(value, str) else json.dumps(value)
        for key, value in message.items()
        if key != "value" and value is not None
    }
