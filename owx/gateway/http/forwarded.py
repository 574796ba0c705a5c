"""The client behind a proxy the operator trusts: its address from ``X-Forwarded-For``.

owx takes turns and shares by client address (:mod:`owx.gateway.turns`). Behind a load balancer
every request would come from the balancer's address, so one client's flood of made-up keys would
queue every other client's. For a connection from a trusted proxy (``gateway.trusted_proxies``),
the request's client is the right-most address of its ``X-Forwarded-For`` that is not itself a
trusted proxy: the hop the last trusted proxy saw. What a client writes into the header itself is
left of that hop and never read; a connection from any other address is its own client, whatever
it sends. Connection-level bounds (connections and bodies held per address) stay those of the
proxy's address: the proxy holds them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

HEADER = b"x-forwarded-for"
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class TrustedProxies:
    """The networks whose connections name their client in ``X-Forwarded-For``."""

    def __init__(self, networks: Iterable[Network]) -> None:
        self._networks = tuple(networks)

    def trusts(self, host: str) -> bool:
        """Whether a peer at ``host`` is a trusted proxy."""
        address = _address(host)
        return address is not None and any(address in network for network in self._networks)

    def client(self, peer: tuple[str, int], headers: list[tuple[bytes, bytes]]) -> tuple[str, int]:
        """The client of a request a trusted ``peer`` forwarded with these raw headers (lower-case
        names): the right-most forwarded hop that is not a trusted proxy; ``peer`` when the header is
        missing, and the last trusted hop when an entry cannot be read (nothing left of it is)."""
        hops = [hop.strip() for name, value in headers if name.lower() == HEADER
                for hop in value.decode("latin-1").split(",")]
        client = peer
        for hop in reversed(hops):
            address = _address(hop)
            if address is None:
                break
            client = (str(address), 0)
            if not any(address in network for network in self._networks):
                break
        return client


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """An address as a proxy writes it (IPv6 possibly in brackets, an IPv4-mapped one as IPv4);
    None for anything else."""
    try:
        address = ipaddress.ip_address(text.strip("[]").split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address
