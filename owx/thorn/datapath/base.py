"""What every datapath driver provides, and the node facts drivers need."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from owx.thorn.model import AppDeviceKind, NodeSpec
from owx.thorn.rules import Rule


@dataclass(frozen=True)
class SyncResult:
    added: int = 0
    removed: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed)


@dataclass(frozen=True)
class AttachPoint:
    """Where frames from an application device can be classified: a device and a tc hook."""

    dev: str
    hook: str  # "ingress" or "egress"


def attach_points(node: NodeSpec) -> list[AttachPoint]:
    """veth / VF representor: the bridge port's ingress; macvlan (on the bridge): the bridge's egress."""
    points = []
    for app in node.app_devices:
        point = (AttachPoint(node.overlay.bridge, "egress") if app.kind is AppDeviceKind.macvlan
                 else AttachPoint(app.port, "ingress"))
        if point not in points:
            points.append(point)
    return points


class DatapathDriver(ABC):
    """Makes the kernel forward each rule's MAC to its VTEP; ``sync`` is idempotent and reads the kernel."""

    name: str

    def __init__(self, node: NodeSpec) -> None:
        self.node = node

    @abstractmethod
    def sync(self, rules: list[Rule]) -> SyncResult:
        """Compare the installed state with ``rules`` and fix the difference."""

    @abstractmethod
    def installed(self) -> set[str]:
        """MACs that currently have a rule in the kernel."""

    @abstractmethod
    def close(self) -> None:
        """Remove everything this driver installed."""
