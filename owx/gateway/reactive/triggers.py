"""Triggers in the entity store (collection ``triggers``), with the rules linked to each.

A trigger document carries ``rules``: ``{"ns/rule": {"action": {"path", "name"}, "status"}}``,
OpenWhisk's own layout, so firing reads one document and the rule API keeps it up to date.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from owx.gateway import entity_names, errors
from owx.gateway.entity_names import TRIGGERS, absent, check_free
from owx.gateway.errors import ApiError, bad_request
from owx.gateway.names import parse_fqn
from owx.gateway.reactive.models import TriggerBody
from owx.gateway.stores import Conflict, Entity, EntityStore
from owx.gateway.versions import next_version

FEED_ANNOTATION = "feed"
FEED_NAME_INVALID = "Feed name is not valid"
UPDATE_ATTEMPTS = 20
SUMMARY_KEYS = ("namespace", "name", "version", "publish", "annotations")


def present(entity: Entity) -> dict[str, Any]:
    """An entity as the API answers it: its document and when it was last written."""
    return {**entity.doc, "updated": entity.updated}


def feed_of(doc: dict[str, Any]) -> str | None:
    """The feed action a trigger was created with (its ``feed`` annotation), if any."""
    for item in doc.get("annotations", ()):
        if item.get("key") == FEED_ANNOTATION and isinstance(item.get("value"), str):
            return item["value"]
    return None


class TriggerCatalog:
    """Create, read, update, list and delete the triggers of a namespace."""

    def __init__(self, store: EntityStore) -> None:
        self.store = store

    def put(self, namespace: str, name: str, body: TriggerBody, overwrite: bool) -> dict[str, Any]:
        body.check_sizes()
        current = self.store.get(namespace, TRIGGERS, name)
        if current is not None and not overwrite:
            raise ApiError(409, errors.ALREADY_EXISTS)
        if current is None:
            check_free(self.store, namespace, TRIGGERS, name)
        old = current.doc if current else {}
        doc = {
            "namespace": namespace,
            "name": name,
            "version": next_version(body.version, old),
            "publish": body.publish if body.publish is not None else old.get("publish", False),
            "parameters": _items(body.parameters, old.get("parameters", [])),
            "annotations": _items(body.annotations, old.get("annotations", [])),
            "limits": {},
        }
        if "rules" in old:
            doc["rules"] = old["rules"]
        if current is None:
            _check_feed(doc)
        try:
            saved = entity_names.put(self.store, namespace, TRIGGERS, name, doc, current.rev if current else None)
        except Conflict:
            raise ApiError(409, errors.CONFLICT if current else errors.ALREADY_EXISTS) from None
        return present(saved)

    def entity(self, namespace: str, name: str) -> Entity | None:
        return self.store.get(namespace, TRIGGERS, name)

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        entity = self.entity(namespace, name)
        if entity is None:
            raise absent(self.store, namespace, TRIGGERS, name)
        return present(entity)

    def list(self, namespace: str, skip: int, limit: int) -> list[dict[str, Any]]:
        entities = self.store.list(namespace, TRIGGERS, skip=skip, limit=limit)
        return [{**{k: e.doc.get(k) for k in SUMMARY_KEYS}, "updated": e.updated} for e in entities]

    def count(self, namespace: str) -> int:
        return self.store.count(namespace, TRIGGERS)

    def delete(self, namespace: str, name: str) -> dict[str, Any]:
        entity = self.entity(namespace, name)
        if entity is None or not entity_names.delete(self.store, namespace, TRIGGERS, name, entity.rev):
            raise absent(self.store, namespace, TRIGGERS, name)
        return present(entity)

    def change_rules(self, namespace: str, name: str, change: Callable[[dict[str, Any]], None]) -> bool:
        """Apply ``change`` to the trigger's ``rules`` map and store it (retried on concurrent writes);
        False if the trigger does not exist."""
        for _ in range(UPDATE_ATTEMPTS):
            entity = self.entity(namespace, name)
            if entity is None:
                return False
            doc = dict(entity.doc)
            rules = dict(doc.get("rules") or {})
            change(rules)
            doc["rules"] = rules
            try:
                self.store.put(namespace, TRIGGERS, name, doc, entity.rev)
                return True
            except Conflict:
                continue
        raise ApiError(409, errors.CONFLICT)


def _items(given: list | None, old: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return old if given is None else [item.entry() for item in given]


def _check_feed(doc: dict[str, Any]) -> None:
    """OpenWhisk refuses a ``feed`` annotation that is not an entity name."""
    for item in doc["annotations"]:
        if item["key"] != FEED_ANNOTATION:
            continue
        value = item.get("value")
        try:
            if not isinstance(value, str):
                raise ValueError(value)
            parse_fqn(value if value.startswith("/") or value.count("/") < 2 else f"/{value}", doc["namespace"])
        except (ApiError, ValueError):
            raise bad_request(FEED_NAME_INVALID) from None
