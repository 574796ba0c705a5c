"""Where activations run: one typed interface (:mod:`.interface`), three implementations.

``embedded`` and ``docker`` are container pools on this machine (:mod:`.embedded`);
``openwhisk`` forwards every activation to an upstream OpenWhisk through its REST API
(:mod:`.openwhisk`). :func:`open_platform` builds the one the settings name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from owx.platform.interface import Platform

if TYPE_CHECKING:
    from owx.common.eventloop import EventLoopThread
    from owx.settings import Settings

__all__ = ["Platform", "open_platform"]


def open_platform(settings: Settings, loop: EventLoopThread | None = None) -> Platform:
    """The platform ``settings.platform.kind`` names, started; an embedded one handles its containers'
    I/O on ``loop`` (the gateway's event loop), or on a loop of its own."""
    if settings.platform.kind == "openwhisk":
        from owx.platform.openwhisk.platform import OpenWhiskPlatform

        return OpenWhiskPlatform(settings.upstream)
    from owx.platform.embedded.platform import EmbeddedPlatform
    from owx.platform.settings import for_instance

    return EmbeddedPlatform(for_instance(settings.platform, settings.data_dir), loop)
