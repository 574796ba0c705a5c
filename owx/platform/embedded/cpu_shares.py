"""CPU weight shared fairly among tenants, as a node's memory is (:mod:`.memory_shares`).

OpenWhisk gives each container CPU shares in proportion to the memory it reserves
(:func:`~owx.platform.embedded.container_limits.cpu_shares`), so under contention a tenant's CPU
grows with its number of containers: one namespace starting sixteen containers at once gets
sixteen times the weight of another's one, whose cold start (its ``/init``) then waits for theirs.
Here each tenant's containers on a node together hold ``TOTAL_SHARES``, split among them in
proportion to the memory each reserves: within a tenant the weights are OpenWhisk's, between
tenants they are equal. Stem cells belong to nobody and keep the shares they were made with.
"""

from __future__ import annotations

from collections.abc import Mapping

from owx.platform.embedded.container_limits import MIN_SHARES, TOTAL_SHARES


def tenant_shares(reserved: Mapping[str, int]) -> dict[str, int]:
    """CPU shares of one tenant's containers on a node, by container id, from the bytes each reserves."""
    total = sum(reserved.values())
    if total <= 0:
        return {cid: TOTAL_SHARES // max(1, len(reserved)) for cid in reserved}
    return {cid: max(MIN_SHARES, TOTAL_SHARES * memory // total) for cid, memory in reserved.items()}
