"""A shared secret between owx's own processes across a network: Escra's node agents and its
allocator, and whoever may change a THORN daemon's reconciler.

Those endpoints change every node's limits or its failover. Bound to loopback only this machine
reaches them; on any other address an action container (or anyone who reaches the node) could,
so there a token is required: ``Authorization: Bearer <token>``, compared in constant time.
"""

from __future__ import annotations

import hmac
import ipaddress


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` keeps a service on this machine alone (``localhost`` included)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def authorized(header: str | None, token: str | None) -> bool:
    """Whether an ``Authorization`` header carries ``token`` (no token: nothing to show)."""
    if not token:
        return True
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


def header(token: str | None) -> dict[str, str]:
    """The header that shows ``token`` (none without one)."""
    return {"Authorization": f"Bearer {token}"} if token else {}
