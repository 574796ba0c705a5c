"""Plug Canary into a gateway: route stateful actions, queue their admission, serve the tables."""

from __future__ import annotations

import logging

from owx.canary import api
from owx.canary.commits import ResultLedger
from owx.canary.core import CanaryCore
from owx.canary.options import CanarySettings
from owx.canary.store_location import StoreLocation
from owx.canary.tables import CoreTables

log = logging.getLogger(__name__)


def install(gateway, settings: CanarySettings | None = None) -> CanaryCore | None:
    """Called once by ``Gateway.open``: Canary serves actions annotated ``canary``."""
    platform = gateway.runner
    if not hasattr(platform, "nodes"):
        log.warning("canary needs the embedded platform; stateful actions run as plain actions")
        return None
    settings = settings or CanarySettings()
    store = StoreLocation(gateway.settings, settings)
    core = CanaryCore(platform, CoreTables(gateway.entities), ResultLedger(gateway.entities), settings, store,
                      gateway.throttle.pump)
    gateway.invoker.route(core.accepts, core, core.gate)
    gateway.extensions["canary"] = core
    gateway.extensions["blueprints"].append(api.register)
    gateway.extensions["closers"].append(core.close)
    return core
