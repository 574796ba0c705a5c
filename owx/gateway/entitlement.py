"""Who may read, invoke or change what: OpenWhisk's implicit rights, for one caller's namespace.

As OpenWhisk's entitlement provider decides (``ActionCollection``, ``PackageCollection``):

* everything in the caller's own namespace is theirs;
* another namespace's package may be read (and its actions read and invoked) only when it is
  published and is not a binding; its default package, its bindings and its private packages
  are refused with 403, whether they exist or not, so nothing leaks about them;
* a binding may be used only by its owner, and only while its owner may read the bound package.

A refusal names the resource that was asked for (``ns``, ``ns/name``, ``ns/pkg`` or
``ns/pkg/name``), as OpenWhisk's message does.
"""

from __future__ import annotations

from dataclasses import dataclass

from owx.gateway import errors
from owx.gateway.entity_names import PACKAGES, absent
from owx.gateway.errors import ApiError, forbidden, not_found
from owx.gateway.names import EntityPath
from owx.gateway.stores import Entity, EntityStore


@dataclass(frozen=True)
class PackageGrant:
    """A package the caller may read: ``entity`` as addressed (maybe a binding) and ``source``, the
    package whose actions it offers (the bound package, or ``entity`` itself)."""

    entity: Entity
    source: Entity

    @property
    def is_binding(self) -> bool:
        return self.entity is not self.source

    @property
    def parameters(self) -> list[dict]:
        """The source package's parameters under the binding's, as OpenWhisk merges them."""
        merged = {item["key"]: item for item in self.source.doc.get("parameters") or ()}
        if self.is_binding:
            merged.update({item["key"]: item for item in self.entity.doc.get("parameters") or ()})
        return list(merged.values())


class Entitlement:
    """Answers "may ``caller`` do this?" over the entity store, raising OpenWhisk's 403/404."""

    def __init__(self, store: EntityStore) -> None:
        self.store = store

    def read_package(self, caller: str, namespace: str, name: str) -> PackageGrant:
        """The package or binding ``namespace/name`` if ``caller`` may read it."""
        grant = self._readable(caller, namespace, name)
        if grant is None:
            raise forbidden(f"{namespace}/{name}")
        return grant

    def use_action(self, caller: str, path: EntityPath) -> PackageGrant | None:
        """Check that ``caller`` may read or invoke the action at ``path``; the grant of its package."""
        if path.package is None:
            if path.namespace != caller:
                raise forbidden(f"{path.namespace}/{path.name}")
            return None
        return self.read_package(caller, path.namespace, path.package)

    @staticmethod
    def change(caller: str, path: EntityPath) -> None:
        """Check that ``caller`` may create, update or delete the entity at ``path`` (owners only)."""
        if path.namespace != caller:
            raise forbidden(str(path))

    def _readable(self, caller: str, namespace: str, name: str) -> PackageGrant | None:
        owner = namespace == caller
        entity = self.store.get(namespace, PACKAGES, name)
        if entity is None:
            if owner:
                raise absent(self.store, namespace, PACKAGES, name)
            return None
        binding = entity.doc.get("binding") or None
        if binding is None:
            return PackageGrant(entity, entity) if owner or entity.doc.get("publish") else None
        if not owner:
            return None
        target_ns, target_name = binding["namespace"], binding["name"]
        if (target_ns, target_name) == (namespace, name):
            raise ApiError(422, errors.BINDING_CIRCULAR.format(name=f"/{namespace}/{name}"))
        source = self.store.get(target_ns, PACKAGES, target_name)
        if source is None and target_ns == caller:
            raise not_found()
        if source is None or source.doc.get("binding"):  # bindings of bindings are never created
            return None
        if target_ns != caller and not source.doc.get("publish"):
            return None
        return PackageGrant(entity, source)
