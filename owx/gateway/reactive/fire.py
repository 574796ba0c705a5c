"""Firing a trigger: activate the action of each of its active rules, record what happened.

As in OpenWhisk, a trigger without an active rule is not activated at all (204, no record);
otherwise the trigger gets an activation record whose ``response.result`` is the payload and whose
``logs`` hold one JSON line per rule: the activation it started, or why it could not start one.
Actions are started as non-blocking invocations, so a fire never waits for them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from owx.gateway.catalog import Catalog, params_dict
from owx.gateway.entity_names import TRIGGERS, absent
from owx.gateway.errors import ApiError
from owx.gateway.identity import Identity
from owx.gateway.ids import new_id
from owx.gateway.pipeline import records
from owx.gateway.pipeline.admission import Throttle
from owx.gateway.pipeline.invoke import DURABLE_WAIT_S, Invoker
from owx.gateway.reactive.models import ACTIVE, ref_path, ref_text
from owx.gateway.reactive.rules import names_trigger
from owx.gateway.reactive.triggers import TriggerCatalog
from owx.gateway.stores import ActivationStore, EntityStore

log = logging.getLogger(__name__)

# OpenWhisk's ActivationResponse codes as a trigger record's rule lines carry them.
STARTED, NOT_STARTED, WHISK_ERROR = 0, 1, 3
INACTIVE_RULE = "Rule '{rule}' is inactive, action '{action}' was not activated."
INTERNAL_SERVER_ERROR = "There was an internal server error."
PRIVATE_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})
Observer = Callable[[str, int], None]  # (namespace, rules activated) after each fire


class TriggerFirer:
    """Fires triggers for the REST API and for feeds."""

    def __init__(self, triggers: TriggerCatalog, catalog: Catalog, entities: EntityStore, invoker: Invoker,
                 activations: ActivationStore, fires_per_minute: int, max_result_bytes: int) -> None:
        self.triggers = triggers
        self.catalog = catalog
        self.entities = entities
        self.invoker = invoker
        self.activations = activations
        self.max_result_bytes = max_result_bytes
        self.rate = Throttle(fires_per_minute, concurrent=2**31)
        self.observers: list[Observer] = []

    def fire(self, identity: Identity, name: str, payload: dict[str, Any],
             headers: dict[str, str] | None = None, transaction: str | None = None) -> str | None:
        """The trigger activation's id, or None when no rule of the trigger is active (404 if absent).
        The rules' actions run in the fire's ``transaction``, if one is given.

        Every fire counts against the namespace's fires per minute (429 over it), before the trigger
        is even looked up, as OpenWhisk's entitlement check counts it: fires at triggers that do not
        exist or have no active rule cost a lookup each, and are limited too.
        """
        self.rate.admit(identity.namespace)
        self.rate.release(identity.namespace)  # a fire holds nothing while its actions run
        entity = self.triggers.entity(identity.namespace, name)
        if entity is None:
            raise absent(self.entities, identity.namespace, TRIGGERS, name)
        rules = self._linked(identity.namespace, name, entity.doc.get("rules") or {})
        if not any(link.get("status") == ACTIVE for link in rules.values()):
            return None
        start_ms = records.now_ms()
        visible = {k.lower(): v for k, v in (headers or {}).items() if k.lower() not in PRIVATE_HEADERS}
        args = {**params_dict(entity.doc.get("parameters")), **({"__ow_headers": visible} if headers else {}),
                **payload}
        lines = [self._activate(identity, rule, link, args, transaction) for rule, link in rules.items()]
        activation_id = new_id()
        stored = self.activations.put(records.trigger(activation_id, identity.subject, name,
                                                      entity.doc.get("version", "0.0.1"), start_ms, payload, lines,
                                                      self.max_result_bytes))
        for observe in self.observers:
            observe(identity.namespace, sum(1 for line in lines if line["success"]))
        stored.result(DURABLE_WAIT_S)  # answered for only once it cannot be lost
        return activation_id

    def _linked(self, namespace: str, trigger: str, links: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The trigger's ``links`` whose rules name it; the others (a rule deleted or moved by a write a
        killed gateway cut off) are dropped from the trigger, each checked again as it goes."""
        live = {rule: link for rule, link in links.items() if names_trigger(self.entities, rule, namespace, trigger)}
        if len(live) < len(links):
            def drop_stale(current: dict[str, Any]) -> None:
                for rule in [r for r in current if r not in live]:
                    if not names_trigger(self.entities, rule, namespace, trigger):
                        current.pop(rule)

            self.triggers.change_rules(namespace, trigger, drop_stale)
        return live

    def _activate(self, identity: Identity, rule: str, link: dict[str, Any], args: dict[str, Any],
                  transaction: str | None) -> dict[str, Any]:
        """One rule line of the trigger record: the action's activation id, or why there is none."""
        action = ref_text(link["action"])
        if link.get("status") != ACTIVE:
            return _line(rule, action, NOT_STARTED, error=INACTIVE_RULE.format(rule=rule, action=action))
        try:
            resolved = self.catalog.resolve(ref_path(link["action"]), identity.namespace)
            invocation = self.invoker.start(identity, resolved, args, transaction)
        except ApiError as exc:
            return _line(rule, action, WHISK_ERROR if exc.status >= 500 else NOT_STARTED, error=exc.message)
        except Exception:  # noqa: BLE001 - a platform failure becomes the rule's line, as in OpenWhisk
            log.exception("rule %s could not activate %s", rule, action)
            return _line(rule, action, WHISK_ERROR, error=INTERNAL_SERVER_ERROR)
        return _line(rule, action, STARTED, activation_id=invocation.activation_id)


def _line(rule: str, action: str, code: int, *, activation_id: str | None = None,
          error: str | None = None) -> dict[str, Any]:
    line: dict[str, Any] = {"rule": rule, "action": action, "statusCode": code, "success": code == STARTED}
    if activation_id is not None:
        line["activationId"] = activation_id
    else:
        line["error"] = error
    return line
