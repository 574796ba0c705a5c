"""At most a few container starts of one tenant at once on a node.

A start (the container made, then ``/init``: an interpreter importing the action's code) is mostly
CPU work. A tenant that invoked 40 new actions at once started 16 containers together (all the
node's memory held), and another tenant's one cold start shared the cores with all of them: its
``/init`` took 37-119 ms instead of 12-17 ms. A tenant's starts beyond ``per_tenant`` wait for one
of its own to end; other tenants' starts do not wait for them. The platform's default is twice the
machine's cores: on a 2-core VM the burst of 40 then ended as soon as with no bound (493 against
486 ms), and the other tenant's start took 37-98 ms; with the cores alone it took 39-56 ms, but the
burst ended 20% later (586 ms): starts are not all CPU.

A start waits for its turn before it is given memory (the pool asks :meth:`StartTurns.full` before
it plans one): waiting with its memory held, a burst kept the node full while only a few of its
starts ran, and another tenant's start waited for that memory.
"""

from __future__ import annotations


class StartTurns:
    """Counts each tenant's container starts on one node; used under the pool's lock."""

    def __init__(self, per_tenant: int) -> None:
        if per_tenant < 1:
            raise ValueError("a tenant needs at least one start at a time")
        self.per_tenant = per_tenant
        self._starting: dict[str, int] = {}

    def full(self, tenant: str) -> bool:
        """Whether ``per_tenant`` starts of ``tenant`` run: its next one waits."""
        return self._starting.get(tenant, 0) >= self.per_tenant

    def begin(self, tenant: str) -> None:
        self._starting[tenant] = self._starting.get(tenant, 0) + 1

    def end(self, tenant: str) -> None:
        left = self._starting.pop(tenant) - 1
        if left:
            self._starting[tenant] = left
