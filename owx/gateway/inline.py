"""Views that run on the event loop when they need no I/O; whatever would block sends them to a thread.

A warm invoke spends most of its gateway time handing work between threads. When the caller's
identity and the action are cached, its view only computes and queues, so the server runs it on
the event loop itself (:class:`owx.gateway.asgi.FlaskOnAsgi`). Code that would block there (a
store read on a cache miss, a full write queue, an extension's reservation, a held wait) calls
:func:`require_thread` first: on the loop that raises :class:`NeedsThread` before any side
effect, and the server runs the request again, from the start, on one of its threads.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_ON_LOOP: ContextVar[bool] = ContextVar("owx_view_on_loop", default=False)


class NeedsThread(BaseException):
    """A view on the event loop reached code that may block. A ``BaseException``, so that the
    app's catch-all error handler (a 500) lets it through to the server, which retries on a thread."""


def require_thread() -> None:
    """Call before anything that may block: on the event loop it raises :class:`NeedsThread`."""
    if _ON_LOOP.get():
        raise NeedsThread


@contextmanager
def on_loop() -> Iterator[None]:
    """Mark the code inside as running on the event loop (see :func:`require_thread`)."""
    token = _ON_LOOP.set(True)
    try:
        yield
    finally:
        _ON_LOOP.reset(token)
