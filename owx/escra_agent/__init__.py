"""Escra for owx: 100 ms CPU/memory resizing of action containers, OOM rescue, shared budgets.

- :mod:`.agent` — the node agent (``owx agent``): discovery, telemetry, limits, OOM rescue.
- :mod:`.allocator` — the cluster's resource allocator (``owx agent --controller`` or in-process).
- :mod:`.messages` — the typed agent ↔ allocator protocol; :mod:`.server` / :mod:`.link` carry it.
- :mod:`.ledger` — ``PoolLedger``, what a container pool implements so its budget follows Escra.
- :mod:`.embed` — ``embed_escra(pool, ...)``: both inside the gateway process in one call.
"""
