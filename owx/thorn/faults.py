"""Faults on testbed links and ToRs.

- link down/up: the ToR end of a cable goes down, the host sees carrier loss;
- silent drop: nftables drops everything entering both ends, the link stays up
  (only BFD notices);
- ToR lost: every port of the ToR goes down at once (a switch losing power);
- flaps: link down/up repeated.

A :class:`Fault` is resolved to its commands before it is injected, and all of
them start together (one ``ip -batch`` for a whole ToR), so a fault takes effect
within a few milliseconds of :meth:`Fault.inject`.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from enum import Enum

from owx.thorn import netns
from owx.thorn.testbed import Testbed

NFT_TABLE = "thorn_fault"


class FaultKind(str, Enum):
    link_down = "link-down"
    silent = "silent"
    tor = "tor"


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    input: str | None = None


@dataclass(frozen=True)
class Fault:
    """One fault on a testbed, resolved to the commands that inject and clear it."""

    kind: FaultKind
    target: str  # NODE/UPLINK, or a ToR name
    on: tuple[Command, ...]
    off: tuple[Command, ...]

    def inject(self) -> None:
        _run_together(self.on)

    def clear(self) -> None:
        _run_together(self.off)


def _run_together(commands: tuple[Command, ...]) -> None:
    procs = [(c, subprocess.Popen(c.argv, stdin=subprocess.PIPE if c.input else subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)) for c in commands]
    errors = []
    for command, proc in procs:
        _, err = proc.communicate(command.input, timeout=30)
        if proc.returncode != 0:
            errors.append(f"{' '.join(command.argv)}: {err.strip()}")
    if errors:
        raise netns.NetnsError("; ".join(errors))


def _links(ns: str, devs: list[str], up: bool) -> Command:
    state = "up" if up else "down"
    return Command(("ip", "-n", ns, "-batch", "-"), "".join(f"link set dev {d} {state}\n" for d in devs))


def _nft_chain(dev: str) -> str:
    return "in_" + dev.replace("-", "_")


def _drop(ns: str, dev: str) -> Command:
    rules = (f"table netdev {NFT_TABLE} {{\n chain {_nft_chain(dev)} {{\n"
             f"  type filter hook ingress device \"{dev}\" priority -500; policy drop;\n }}\n}}\n")
    return Command(("ip", "netns", "exec", ns, "nft", "-f", "-"), rules)


def _undrop(ns: str, dev: str) -> Command:
    return Command(("ip", "netns", "exec", ns, "nft", "delete", "chain", "netdev", NFT_TABLE, _nft_chain(dev)))


def resolve(tb: Testbed, kind: FaultKind, target: str) -> Fault:
    """The fault ``kind`` on ``target`` (NODE/UPLINK for link faults, a ToR name for ``tor``)."""
    if kind is FaultKind.tor:
        tor = tb.tor(target)
        ports = [ln.port for ln in tb.cluster().links if ln.tor == target]
        return Fault(kind, target, (_links(tor.netns, ports, False),), (_links(tor.netns, ports, True),))
    node, _, uplink = target.partition("/")
    ln = tb.link(node, uplink)
    tor_ns = tb.tor(ln.tor).netns
    if kind is FaultKind.link_down:
        return Fault(kind, target, (_links(tor_ns, [ln.port], False),), (_links(tor_ns, [ln.port], True),))
    host_ns = tb.node(node).netns
    assert host_ns is not None
    ends = [(host_ns, uplink), (tor_ns, ln.port)]
    return Fault(kind, target, tuple(_drop(ns, d) for ns, d in ends), tuple(_undrop(ns, d) for ns, d in ends))


def link(tb: Testbed, node: str, uplink: str, up: bool) -> None:
    """Take the ToR end of node/uplink down (or back up)."""
    fault = resolve(tb, FaultKind.link_down, f"{node}/{uplink}")
    fault.clear() if up else fault.inject()


def silent(tb: Testbed, node: str, uplink: str, drop: bool) -> None:
    """Drop (or stop dropping) every frame entering either end of node/uplink; carrier stays up."""
    fault = resolve(tb, FaultKind.silent, f"{node}/{uplink}")
    fault.inject() if drop else fault.clear()


def tor(tb: Testbed, name: str, up: bool) -> None:
    """All ports of a ToR down (or up) at once."""
    fault = resolve(tb, FaultKind.tor, name)
    fault.clear() if up else fault.inject()


def flap(tb: Testbed, node: str, uplink: str, count: int, down_s: float = 0.05, up_s: float = 0.05) -> None:
    """Link down/up ``count`` times."""
    fault = resolve(tb, FaultKind.link_down, f"{node}/{uplink}")
    for _ in range(count):
        fault.inject()
        time.sleep(down_s)
        fault.clear()
        time.sleep(up_s)
