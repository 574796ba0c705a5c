"""Gateway extensions: typed plugins found through the ``owx.extensions`` entry point group.

An extension is a class with a ``name`` and two methods, registered the way Flask extensions
are: ``init_app(gateway)`` attaches it (routes activations to its runner, adds blueprints, hooks
the pipeline), ``close()`` stops what it started. Canary, Escra and DiSDeL's estimation are
extensions of owx's own distribution; another distribution adds one by declaring::

    [project.entry-points."owx.extensions"]
    myext = "mypackage.extension:MyExtension"
"""

from __future__ import annotations

import logging
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from owx.gateway.service import Gateway

GROUP = "owx.extensions"
log = logging.getLogger(__name__)


@runtime_checkable
class Extension(Protocol):
    """What an extension class implements; it is made with no arguments."""

    name: str

    def init_app(self, gateway: Gateway) -> None:
        """Attach to ``gateway`` (called once, after its stores and platform are open)."""

    def close(self) -> None:
        """Stop what ``init_app`` started (called once, before the platform closes)."""


class UnknownExtension(ValueError):
    """The settings name an extension no installed distribution provides."""


def available() -> dict[str, type[Extension]]:
    """Every installed extension class by name."""
    return {point.name: point.load() for point in entry_points(group=GROUP)}


def load(names: list[str] | None) -> list[Extension]:
    """Instances of the extensions ``names`` selects (None: every installed one), in name order."""
    classes = available()
    wanted = sorted(classes) if names is None else names
    missing = [name for name in wanted if name not in classes]
    if missing:
        raise UnknownExtension(f"unknown extension(s) {', '.join(missing)}; installed: {', '.join(sorted(classes))}")
    extensions = [classes[name]() for name in wanted]
    for extension in extensions:
        if not isinstance(extension, Extension):
            raise TypeError(f"extension {extension!r} does not implement owx.gateway.extensions.Extension")
    return extensions
