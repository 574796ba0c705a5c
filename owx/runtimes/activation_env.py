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

The process-wide values are set with ``putenv`` of strings this module keeps, not with
``os.environ[...] =``: that calls glibc's ``setenv``, which keeps every string it was ever given
(so that a pointer someone took stays valid), and an activation's id, transaction id and deadline
are new every time: a warm container grew by about 200 bytes per activation, for ever, and each
``setenv`` searched a tree of them all.
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
_held: dict[str, object] = {}  # the __OW_* variables this module set: name -> the C string environ points at
_c = None  # (ctypes' string buffer maker, libc's putenv), loaded with the first activation: ctypes costs ~1 ms


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
        _set_process_env(values)
    _local.env = values
    try:
        yield
    finally:
        _local.env = None


def _set_process_env(values: dict[str, str]) -> None:
    """Make the process environment's ``__OW_*`` variables ``values`` (under the lock)."""
    global _c
    if _c is None:
        import ctypes

        _c = ctypes.create_string_buffer, ctypes.CDLL(None).putenv
        _held.update((key, None) for key in os.environ if key.startswith(OW_PREFIX))  # inherited: looked for once
    string, putenv = _c
    data = os.environ._data  # type: ignore[attr-defined] # os.environ's own mapping, set beside environ
    for stale in [key for key in _held if key not in values]:
        os.unsetenv(stale)
        data.pop(os.fsencode(stale), None)
        del _held[stale]
    for key, value in values.items():
        name, encoded = os.fsencode(key), os.fsencode(value)
        if key in _held and data.get(name) == encoded:
            continue  # unchanged since the last activation (its namespace, action, key, ...)
        if b"\0" in name or b"=" in name or b"\0" in encoded:
            raise ValueError(f"not an environment variable: {key!r}")  # what os.environ refuses too
        held = string(name + b"=" + encoded)
        if putenv(held) != 0:
            raise OSError(f"putenv {key} failed")
        data[name] = encoded
        _held[key] = held  # environ points at it now: kept until another value replaces it


def ow_env(message: dict[str, object]) -> dict[str, str]:
    """``__OW_<KEY>`` variables of a ``/run`` message: every key except ``value``.

    Strings are taken as they are, other values as JSON; ``null`` values are left out.
    """
    return {
        OW_PREFIX + key.upper(): value if isinstance(value, str) else json.dumps(value)
        for key, value in message.items()
        if key != "value" and value is not None
    }
