"""Triggers, rules, firing and the alarms feed of one gateway, wired together."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from owx.gateway.errors import ApiError
from owx.gateway.feeds.alarms import AlarmFeed
from owx.gateway.reactive.fire import TriggerFirer
from owx.gateway.reactive.rules import RuleCatalog
from owx.gateway.reactive.triggers import TriggerCatalog

if TYPE_CHECKING:
    from owx.gateway.service import Gateway

log = logging.getLogger(__name__)


class Reactive:
    """What the trigger and rule APIs use; ``start`` schedules the stored alarms, ``close`` stops them."""

    def __init__(self, gateway: Gateway) -> None:
        settings = gateway.settings.gateway
        self.triggers = TriggerCatalog(gateway.entities)
        self.rules = RuleCatalog(gateway.entities, self.triggers)
        self.firer = TriggerFirer(self.triggers, gateway.catalog, gateway.entities, gateway.invoker,
                                  gateway.activations, settings.trigger_fires_per_minute, settings.max_payload_bytes)
        self.alarms = AlarmFeed(gateway.entities, gateway.auth, self.firer, self.delete_trigger)
        gateway.invoker.route(self.alarms.accepts, self.alarms)

    def start(self) -> None:
        self.alarms.start()

    def close(self) -> None:
        self.alarms.close()

    def delete_trigger(self, namespace: str, name: str, with_rules: bool = False) -> dict[str, Any]:
        """Delete a trigger and stop its feed (``with_rules``: delete the rules that fire from it too)."""
        trigger = self.triggers.delete(namespace, name)
        self.alarms.forget(namespace, name)
        for rule in (trigger.get("rules") or {}) if with_rules else ():
            rule_namespace, _, rule_name = rule.partition("/")
            try:
                self.rules.delete(rule_namespace, rule_name)
            except ApiError:
                log.info("rule %s of deleted trigger %s/%s was already gone", rule, namespace, name)
        return trigger
