"""The embedded platform: action containers (backends), their pools, and nodes."""

from __future__ import annotations

from owx.gateway.platform.cluster import Platform
from owx.gateway.platform.container import Backend, Container
from owx.gateway.platform.node import Node
from owx.gateway.platform.pool import ContainerPool

__all__ = ["Backend", "Container", "ContainerPool", "Node", "Platform"]
