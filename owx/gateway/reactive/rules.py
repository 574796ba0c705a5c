"""Rules in the entity store (collection ``rules``); each rule's status lives in its trigger.

As in OpenWhisk, a rule document names its trigger and action; whether it is active is kept in
the trigger's ``rules`` map, and a rule whose trigger is gone is inactive. A rule may name the
caller's actions or actions in another namespace's published package.

The rule document and its trigger's link are two writes, so a gateway killed between them leaves
one without the other. The document is the truth: a link counts only while its rule names that
trigger (:func:`names_trigger`; firing drops the others), and a rule whose link is missing
altogether (not disabled: gone) is linked again, active, by its next update.
"""

from __future__ import annotations

from typing import Any

from owx.gateway import entity_names, errors
from owx.gateway.entitlement import Entitlement
from owx.gateway.entity_names import ACTIONS, PACKAGES, RULES, absent, check_free
from owx.gateway.errors import ApiError, bad_request, not_found
from owx.gateway.identity import Identity
from owx.gateway.names import EntityPath
from owx.gateway.reactive.models import ACTIVE, INACTIVE, RuleBody, ref_doc, ref_path, resolve_ref
from owx.gateway.reactive.triggers import TriggerCatalog, present
from owx.gateway.stores import Conflict, Entity, EntityStore
from owx.gateway.versions import next_version

NEEDS_TRIGGER_AND_ACTION = "rule requires a valid trigger and a valid action"
NO_TRIGGER_TO_ACTIVATE = "Only rules with existing triggers can be activated"


class RuleCatalog:
    """Create, read, update, enable, disable, list and delete the rules of a namespace."""

    def __init__(self, store: EntityStore, triggers: TriggerCatalog) -> None:
        self.store = store
        self.triggers = triggers

    def put(self, identity: Identity, name: str, body: RuleBody, overwrite: bool) -> dict[str, Any]:
        body.check_sizes()
        namespace = identity.namespace
        current = self.store.get(namespace, RULES, name)
        if current is not None and not overwrite:
            raise ApiError(409, errors.ALREADY_EXISTS)
        old = current.doc if current else {}
        if current is None:
            check_free(self.store, namespace, RULES, name)
            if body.trigger is None or body.action is None:
                raise bad_request(NEEDS_TRIGGER_AND_ACTION)
        trigger = resolve_ref(body.trigger, namespace) if body.trigger is not None else ref_path(old["trigger"])
        action = resolve_ref(body.action, namespace) if body.action is not None else ref_path(old["action"])
        self._check_references(identity, trigger, action)
        status = (self._link(old) or {"status": ACTIVE})["status"] if current else ACTIVE  # no link: a write cut off
        doc = {
            "namespace": namespace,
            "name": name,
            "version": next_version(body.version, old),
            "publish": body.publish if body.publish is not None else old.get("publish", False),
            "annotations": [a.entry() for a in body.annotations] if body.annotations is not None
            else old.get("annotations", []),
            "trigger": ref_doc(trigger),
            "action": ref_doc(action),
        }
        try:
            saved = entity_names.put(self.store, namespace, RULES, name, doc, current.rev if current else None)
        except Conflict:
            raise ApiError(409, errors.CONFLICT if current else errors.ALREADY_EXISTS) from None
        key = _rule_key(namespace, name)
        link = {"action": doc["action"], "status": status}
        try:
            linked = self.triggers.change_rules(trigger.namespace, trigger.name, lambda rules: rules.update({key: link}))
        except Exception:  # the trigger cannot take the link (its size, the store): the rule is as it was
            self._undo_put(namespace, name, saved, current)
            raise
        if current is not None and old["trigger"] != doc["trigger"]:
            old_trigger = ref_path(old["trigger"])
            self.triggers.change_rules(old_trigger.namespace, old_trigger.name, lambda rules: rules.pop(key, None))
        return {**present(saved), "status": status if linked else INACTIVE}

    def _undo_put(self, namespace: str, name: str, saved: Entity, before: Entity | None) -> None:
        """Put back the rule ``saved`` replaced (``before``), or delete it if it is new."""
        if before is None:
            entity_names.delete(self.store, namespace, RULES, name, saved.rev)
        else:
            self.store.put(namespace, RULES, name, before.doc, saved.rev)

    def _check_references(self, identity: Identity, trigger: EntityPath, action: EntityPath) -> None:
        """OpenWhisk's checks: the caller may use both, and both exist (400 naming the missing one)."""
        if trigger.package is not None:
            raise bad_request(errors.NAME_ILLEGAL)
        if trigger.namespace != identity.namespace:
            raise ApiError(403, errors.NOT_AUTHORIZED.format(f"{trigger.namespace}/{trigger.name}"))
        Entitlement(self.store).use_action(identity.namespace, action)
        if self.triggers.entity(trigger.namespace, trigger.name) is None:
            raise bad_request(f"trigger {trigger.fqn} does not exist")
        if not self._action_exists(action):
            raise bad_request(f"action {action.fqn} does not exist")

    def _action_exists(self, action: EntityPath) -> bool:
        namespace, package = action.namespace, action.package
        if package is not None:
            bound = self.store.get(namespace, PACKAGES, package)
            binding = bound.doc.get("binding") if bound is not None else None
            if binding:
                namespace, package = binding["namespace"], binding["name"]
        relative = f"{package}/{action.name}" if package else action.name
        return self.store.get(namespace, ACTIONS, relative) is not None

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        entity = self._entity(namespace, name)
        return {**present(entity), "status": self._status(entity.doc)}

    def list(self, namespace: str, skip: int, limit: int) -> list[dict[str, Any]]:
        return [present(e) for e in self.store.list(namespace, RULES, skip=skip, limit=limit)]

    def count(self, namespace: str) -> int:
        return self.store.count(namespace, RULES)

    def delete(self, namespace: str, name: str) -> dict[str, Any]:
        entity = self._entity(namespace, name)
        trigger = ref_path(entity.doc["trigger"])
        key = _rule_key(namespace, name)
        self.triggers.change_rules(trigger.namespace, trigger.name, lambda rules: rules.pop(key, None))
        if not entity_names.delete(self.store, namespace, RULES, name, entity.rev):
            raise absent(self.store, namespace, RULES, name)
        return {**present(entity), "status": INACTIVE}

    def set_status(self, namespace: str, name: str, status: str) -> None:
        """Enable or disable; a rule already in ``status`` is left as it is."""
        entity = self._entity(namespace, name)
        if self._status(entity.doc) == status:
            return
        key = _rule_key(namespace, name)
        link = {"action": entity.doc["action"], "status": status}
        if not self.triggers.change_rules(*_trigger_key(entity.doc), lambda rules: rules.update({key: link})):
            raise not_found(NO_TRIGGER_TO_ACTIVATE)

    def _entity(self, namespace: str, name: str) -> Entity:
        entity = self.store.get(namespace, RULES, name)
        if entity is None:
            raise absent(self.store, namespace, RULES, name)
        return entity

    def _status(self, doc: dict[str, Any]) -> str:
        """The rule's status as its trigger records it; inactive when the trigger or the link is gone."""
        link = self._link(doc)
        return link["status"] if link else INACTIVE

    def _link(self, doc: dict[str, Any]) -> dict[str, Any] | None:
        """The link to the rule ``doc`` in its trigger, if both are there."""
        trigger = self.triggers.entity(*_trigger_key(doc))
        return (trigger.doc.get("rules") or {}).get(_rule_key(doc["namespace"], doc["name"])) if trigger else None


def names_trigger(store: EntityStore, rule_key: str, namespace: str, trigger: str) -> bool:
    """Whether the rule of a trigger's link ``rule_key`` (``ns/name``) exists and names that trigger."""
    rule_namespace, _, name = rule_key.partition("/")
    rule = store.get(rule_namespace, RULES, name) if rule_namespace and name else None
    return rule is not None and _trigger_key(rule.doc) == (namespace, trigger)


def _rule_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def _trigger_key(doc: dict[str, Any]) -> tuple[str, str]:
    trigger = ref_path(doc["trigger"])
    return trigger.namespace, trigger.name
