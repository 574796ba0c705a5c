"""Canary as a gateway extension: route stateful actions, queue their admission, serve the tables."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from owx.canary import api
from owx.canary.commits import ResultLedger
from owx.canary.core import CanaryCore
from owx.canary.store_location import StoreLocation
from owx.canary.tables import CoreTables

if TYPE_CHECKING:
    from owx.gateway.service import Gateway


class CanaryExtension:
    """Actions annotated ``canary`` run through :class:`CanaryCore`; the rest stay plain OpenWhisk."""

    name = "canary"

    def __init__(self) -> None:
        self.core: CanaryCore | None = None

    def init_app(self, gateway: Gateway) -> None:
        settings = gateway.settings
        store = StoreLocation(settings, settings.canary, gateway.platform)
        self.core = CanaryCore(gateway.platform, CoreTables(gateway.entities), ResultLedger(gateway.entities),
                               settings.canary, store, gateway.throttle.pump, settings.gateway.max_payload_bytes)
        gateway.invoker.route(self.core.accepts, self.core, self.core.gate)
        gateway.invoker.unfinished_observers.append(self.core.unfinished)
        gateway.blueprints.append(api.register)
        gateway.catalog.action_checks.append(api.check_action)
        gateway.catalog.action_checks.append(partial(api.check_copies_fit, self.core))

    def collect(self):
        """Canary's metrics on the gateway's ``/metrics``: recoveries, commits, discarded duplicates."""
        from prometheus_client.core import CounterMetricFamily

        stats = self.core.stats if self.core is not None else {}
        for key, text in (("recoveries", "Stateful activations resumed after their container died"),
                          ("commits", "Results committed (exactly once)"),
                          ("duplicates_discarded", "Duplicate results discarded")):
            yield CounterMetricFamily(f"owx_canary_{key}", text, value=stats.get(key, 0))

    def close(self) -> None:
        if self.core is not None:
            self.core.close()
