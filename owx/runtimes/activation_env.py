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
``setenv`` searched a tree of them all. A variable's next value is written into the string
``environ`` already points at when it fits there (``putenv`` documents that changing the string
changes the environment): the id, transaction id and deadline of the next activation always do, so
a warm activation calls no C function at all to set them.
"""

from __future__ import annotations

import json
import os
import sys
import threading

TYPE_CHECKING = False  # typing costs ~4 ms of start-up; only type checkers need it
if TYPE_CHECKING:
    from typing import Any

OW_PREFIX = "__OW_"
SPARE_BYTES = 32  # room a variable's string keeps for longer values, so that they are written in place
_ENCODING, _ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()  # os.fsencode's
_local = threading.local()
_process_env_lock = threading.Lock()
_c = None  # (ctypes' string buffer maker, libc's putenv), loaded with the first activation: ctypes costs ~1 ms


class _Variable:
    """An ``__OW_*`` variable of the process environment: its name and value, and the C string
    ``environ`` points at (None: inherited, not set by this module)."""

    __slots__ = ("line", "name", "value")

    def __init__(self, name: bytes) -> None:
        self.name = name
        self.value: str | None = None
        self.line: Any = None


_held: dict[str, _Variable] = {}  # the __OW_* variables of the process environment


class _ActivationEnviron(os._Environ):  # type: ignore[name-defined,misc]
    """``os.environ`` whose reads see the current thread's activation values first."""

    def __getitem__(self, key: str) -> str:
        overlay = _local.__dict__.get("env")
        if overlay is not None and key in overlay:
            return overlay[key]
        return super().__getitem__(key)

    # An action that sets or deletes an ``__OW_*`` variable itself leaves ``environ`` pointing at
    # another string than the one this module writes in place, or at none: the next activation puts
    # its value anew (and removes a variable the action added that it does not carry).
    def __setitem__(self, key: str, value: str) -> None:
        with _process_env_lock:
            super().__setitem__(key, value)
            if key.startswith(OW_PREFIX):
                _held[key] = _Variable(os.fsencode(key))

    def __delitem__(self, key: str) -> None:
        with _process_env_lock:
            super().__delitem__(key)
            _held.pop(key, None)


def install() -> None:
    """Make ``os.environ`` activation-aware (same object, so every reference sees it)."""
    if type(os.environ) is os._Environ:  # type: ignore[attr-defined]
        os.environ.__class__ = _ActivationEnviron


class activation_env:  # a context manager, named as contextlib's are
    """Expose ``values`` as environment variables to the code run inside the block.

    ``__OW_*`` keys of an earlier activation that this one does not carry are removed,
    so a warm container never shows one activation's metadata to the next.
    """

    __slots__ = ("values",)

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def __enter__(self) -> None:
        with _process_env_lock:
            _set_process_env(self.values)
        _local.env = self.values

    def __exit__(self, *_: object) -> None:
        _local.env = None


def _set_process_env(values: dict[str, str]) -> None:
    """Make the process environment's ``__OW_*`` variables ``values`` (under the lock)."""
    global _c
    if _c is None:
        import ctypes

        _c = ctypes.create_string_buffer, ctypes.CDLL(None).putenv
        _held.update((key, _Variable(os.fsencode(key))) for key in os.environ if key.startswith(OW_PREFIX))
    data = os.environ._data  # type: ignore[attr-defined] # os.environ's own mapping, set beside environ
    if stale := _held.keys() - values.keys():
        for key in stale:
            os.unsetenv(key)
            data.pop(_held.pop(key).name, None)
    for key, value in values.items():
        variable = _held.get(key)
        if variable is not None and variable.value == value:
            continue  # unchanged since the last activation (its namespace, action, key, ...)
        if variable is None:
            variable = _Variable(os.fsencode(key))
        encoded = value.encode(_ENCODING, _ERRORS)
        if b"\0" in variable.name or b"=" in variable.name or b"\0" in encoded:
            raise ValueError(f"not an environment variable: {key!r}")  # what os.environ refuses too
        line = variable.name + b"=" + encoded
        if variable.line is not None and len(line) < len(variable.line):
            variable.line.value = line  # written where environ points, ended by a NUL
        else:
            string, putenv = _c
            held = string(line, len(line) + SPARE_BYTES)
            if putenv(held) != 0:
                raise OSError(f"putenv {key} failed")
            variable.line = held  # environ points at it now: kept until another string replaces it
        data[variable.name] = encoded
        variable.value = value
        _held[key] = variable


def ow_env(message: dict[str, object]) -> dict[str, str]:
    """``__OW_<KEY>`` variables of a ``/run`` message: every key except ``value``.

    Strings are taken as they are, other values as JSON; ``null`` values are left out.
    """
    return {
        OW_PREFIX + key.upper(): value if isinstance(value, str) else json.dumps(value)
        for key, value in message.items()
        if key != "value" and value is not None
    }
