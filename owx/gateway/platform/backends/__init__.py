"""Container backends: one module each, all implementing ``platform.container.Backend``."""

from __future__ import annotations

from owx.gateway.platform.container import Backend
from owx.gateway.platform.settings import PlatformSettings


def make_backend(name: str, settings: PlatformSettings, action_user: str, runtime_image: str) -> Backend:
    """The backend called ``name`` ("local" or "docker")."""
    if name == "local":
        from owx.gateway.platform.backends.local import LocalBackend

        return LocalBackend(settings, action_user)
    if name == "docker":
        from owx.gateway.platform.backends.docker import DockerBackend

        return DockerBackend(runtime_image)
    raise ValueError(f"unknown backend {name!r}: expected 'local' or 'docker'")
