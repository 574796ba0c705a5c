"""Actions and packages: OpenWhisk's create/update/merge rules over the EntityStore.

Every operation names its caller (the namespace of the key that asked); what the caller may
reach in other namespaces is decided by `owx.gateway.entitlement`. Package bindings resolve to
the bound package's actions, with parameters merged as OpenWhisk merges them: package, then
binding, then action (then, at invoke, the request's), each over the one before.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from owx.gateway import entity_names, errors
from owx.gateway.action_limits import effective, merge_limits
from owx.gateway.entitlement import Entitlement, PackageGrant
from owx.gateway.entity_names import ACTIONS, PACKAGES, absent, check_free
from owx.gateway.errors import ApiError, bad_request, forbidden
from owx.gateway.models import MAX_SEQUENCE_LENGTH, ActionBody, ExecBody, KeyValue, PackageBody
from owx.gateway.names import DEFAULT_PACKAGE, EntityPath, parse_fqn
from owx.gateway.settings import ActionLimits
from owx.gateway.stores import Conflict, Entity, EntityStore, InvalidInput
from owx.gateway.versions import next_version
from owx.platform import Platform
from owx.platform.types import PYTHON_KINDS

RESOLVE_TTL_S = 2.0  # how long an invocation may see an action another gateway changed
MAX_SEQUENCE_NODES = 10 * MAX_SEQUENCE_LENGTH  # actions and nested sequences looked at per check
WEB_SECRET = "require-whisk-auth"  # a string or number: what a web action's callers must send
HIDDEN_SECRET = "[hidden]"  # what other namespaces read instead
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{4}|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{2}==)")


def _kv(items: list[KeyValue] | None) -> list[dict[str, Any]] | None:
    return None if items is None else [item.entry() for item in items]


def _action_parameters(exec_doc: dict[str, Any], body: ActionBody, current: dict[str, Any] | None) -> list[Any]:
    """An action's stored parameters. A sequence's are OpenWhisk's ``_actions`` (its components),
    whatever the body says: its input goes to its first component without parameters of its own."""
    if exec_doc["kind"] == "sequence":
        if body.exec is None and current is not None:
            return current["parameters"]
        return [{"key": "_actions", "value": list(exec_doc["components"])}]
    given = _kv(body.parameters)
    if given is not None:
        return given
    if current is None or current["exec"]["kind"] == "sequence":
        return []
    return current.get("parameters", [])


def _updated_annotations(stored: list[dict[str, Any]], body: ActionBody) -> list[dict[str, Any]]:
    """An action's annotations after a PUT, as OpenWhisk merges them: the stored ones less the keys in
    ``delAnnotations``, then the body's laid over them key by key (a repeated key: the last wins)."""
    deleted = set(body.delAnnotations or ())
    annotations = [dict(item) for item in stored if item["key"] not in deleted]
    for item in _kv(body.annotations) or ():
        _set_annotation(annotations, item["key"], item["value"])
    return annotations


def _set_annotation(annotations: list[dict[str, Any]], key: str, value: Any, keep: bool = False) -> None:
    for item in annotations:
        if item["key"] == key:
            if not keep:
                item["value"] = value
            return
    annotations.append({"key": key, "value": value})


def annotation(doc: dict[str, Any], key: str, default: Any = None) -> Any:
    """The value of annotation ``key`` of an entity document."""
    for item in doc.get("annotations", ()):
        if item.get("key") == key:
            return item.get("value")
    return default


def without_web_secret(doc: dict[str, Any]) -> dict[str, Any]:
    """An action as another namespace reads it (a published package's): the secret its web callers
    must send (a ``require-whisk-auth`` string or number) is hidden, whoever may read the rest."""
    def secret(item: dict[str, Any]) -> bool:
        return item.get("key") == WEB_SECRET and not isinstance(item.get("value"), bool)

    annotations = doc.get("annotations") or []
    if not any(secret(item) for item in annotations):
        return doc
    return {**doc, "annotations": [{**item, "value": HIDDEN_SECRET} if secret(item) else item for item in annotations]}


def params_dict(items: list[dict[str, Any]] | None, init: bool | None = None) -> dict[str, Any]:
    """``{key: value}`` of the parameters: all, or those that are (``init``) or are not init parameters."""
    return {item["key"]: item.get("value") for item in items or () if init is None or bool(item.get("init")) == init}


def _inherit(inherited: list[dict[str, Any]], own: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """``own`` parameters over ``inherited`` ones, as a ``{key, value}`` list."""
    merged = {item["key"]: item for item in inherited}
    merged.update({item["key"]: item for item in own or ()})
    return list(merged.values())


def is_binary_code(code: str) -> bool:
    """Whether ``code`` is an archive, as OpenWhisk decides it whatever the body's ``binary`` says:
    its trimmed text is base64."""
    text = code.strip()
    return bool(text) and len(text) % 4 == 0 and _BASE64.fullmatch(text) is not None


@dataclass(frozen=True)
class ResolvedAction:
    """An action ready to invoke: its record, store revision and effective parameters.

    ``path`` is where the action lives; ``binding`` the ``ns/binding`` it was reached through, if
    any; ``caller`` the namespace invoking it.
    """

    path: EntityPath
    doc: dict[str, Any]
    rev: str
    caller: str
    parameters: dict[str, Any] = field(default_factory=dict)
    resolved_at: float = 0.0
    binding: str | None = None
    init_parameters: dict[str, Any] = field(default_factory=dict)

    def arguments(self, given: dict[str, Any] | list[Any]) -> dict[str, Any] | list[Any]:
        """The action's input: ``given`` over its parameters. An init parameter is the container's
        environment, set by the action's owner: a caller's argument of that name is dropped (OpenWhisk
        would make it the environment of a new container). An array (a sequence's previous result)
        is the input as it is, without the parameters (OpenWhisk's); so is a sequence's input, whose
        first component merges its own parameters."""
        if isinstance(given, list) or self.kind == "sequence":  # a sequence passes on its input alone
            return given
        merged = {**self.parameters, **given}
        return {k: v for k, v in merged.items() if k not in self.init_parameters} if self.init_parameters else merged

    @property
    def kind(self) -> str:
        return self.doc["exec"]["kind"]

    @property
    def limits(self) -> dict[str, int]:
        return self.doc["limits"]

    @property
    def gets_api_key(self) -> bool:
        """Whether the caller's key goes to the action (``provide-api-key``, true when absent, as
        OpenWhisk reads it): only to the caller's own actions. OpenWhisk hands it to shared actions
        too; owx does not give one tenant's key to code another tenant wrote."""
        return bool(annotation(self.doc, "provide-api-key", True)) and self.caller == self.path.namespace

    @property
    def container_key(self) -> str:
        """What the platform keys containers by: the action's revision, and the invoking namespace
        when it is not the owner's, so that tenants never share a container (as OpenWhisk keys
        warm containers by invocation namespace and action)."""
        key = f"{self.path}@{self.rev}"
        return key if self.caller == self.path.namespace else f"{key}#{self.caller}"


class Catalog:
    """Create, read, update, list and delete actions and packages, on behalf of a caller."""

    def __init__(self, store: EntityStore, limits: ActionLimits, platform: Platform) -> None:
        self.store = store
        self.configured_limits = limits
        self.platform = platform
        self.access = Entitlement(store)
        self._resolved: dict[tuple[str, EntityPath], ResolvedAction] = {}
        self._lock = threading.Lock()
        # extensions' checks of an action as it would be stored (after the caller's rights and the
        # merge with what is stored); each raises an ApiError to refuse it
        self.action_checks: list[Callable[[dict[str, Any]], None]] = []

    @property
    def limits(self) -> ActionLimits:
        """The limits actions may ask for: the configured ones, within what the platform can hold."""
        return effective(self.configured_limits, self.platform.limits())

    # -- actions -----------------------------------------------------------
    def put_action(self, caller: str, path: EntityPath, body: ActionBody, overwrite: bool) -> dict[str, Any]:
        self.access.change(caller, path)
        body.check_sizes()
        if path.package:
            self._require_package(path.namespace, path.package)
        current = self.store.get(path.namespace, ACTIONS, path.relative)
        if current and not overwrite:
            raise ApiError(409, errors.ALREADY_EXISTS)
        if current is None:
            check_free(self.store, path.namespace, ACTIONS, path.relative)
            if body.exec is None:
                raise bad_request("The request content was malformed:\nexec undefined")
        doc = self._merge_action(path, body, current.doc if current else None)
        for check in self.action_checks:
            check(doc)
        saved = self._put(path.namespace, ACTIONS, path.relative, doc, current)
        if current is not None:
            self.platform.forget(str(path))
        return self._present(saved)

    def _put(self, namespace: str, collection: str, name: str, doc: dict[str, Any],
             current: Entity | None) -> Entity:
        try:
            saved = entity_names.put(self.store, namespace, collection, name, doc, current.rev if current else None)
        except Conflict:
            raise ApiError(409, errors.CONFLICT if current else errors.ALREADY_EXISTS) from None
        except InvalidInput as exc:  # every field was checked; this is the store's last word
            raise bad_request(errors.MALFORMED.format(detail=exc)) from None
        self._forget()
        return saved

    def _merge_action(self, path: EntityPath, body: ActionBody, current: dict[str, Any] | None) -> dict[str, Any]:
        exec_doc = self._exec(path, body.exec) if body.exec else dict(current["exec"])  # type: ignore[index]
        annotations = _updated_annotations((current or {}).get("annotations", []), body)
        _set_annotation(annotations, "exec", exec_doc["kind"])
        if current is None:  # OpenWhisk adds it on create only: an update keeps what is stored
            _set_annotation(annotations, "provide-api-key", False, keep=True)
        return {
            "namespace": f"{path.namespace}/{path.package}" if path.package else path.namespace,
            "name": path.name,
            "version": next_version(body.version, current),
            "publish": body.publish if body.publish is not None else (current or {}).get("publish", False),
            "exec": exec_doc,
            "annotations": annotations,
            "parameters": _action_parameters(exec_doc, body, current),
            "limits": merge_limits((current or {}).get("limits"), body.limits, self.limits),
        }

    def _exec(self, path: EntityPath, body: ExecBody) -> dict[str, Any]:
        unsupported = self.platform.unsupported(body.kind) if body.kind != "sequence" else None
        if unsupported:
            raise bad_request(unsupported)
        if body.kind in PYTHON_KINDS:
            if not body.code:
                raise bad_request("The request content was malformed:\nexec.code undefined")
            return {"kind": body.kind, "code": body.code, "binary": is_binary_code(body.code),
                    "main": body.main or "main"}
        if body.kind == "blackbox":
            if not body.image:
                raise bad_request("The request content was malformed:\nexec.image undefined")
            doc: dict[str, Any] = {"kind": "blackbox", "image": body.image, "binary": False}
            if body.code and body.code.strip():
                doc.update(code=body.code, main=body.main or "main", binary=is_binary_code(body.code))
            return doc
        return {"kind": "sequence", "components": self._components(path, body.components), "binary": False}

    def _components(self, path: EntityPath, components: list[str] | None) -> list[str]:
        """The components as fully qualified names, checked as OpenWhisk checks them: the caller may
        read each (403), then no cycle, at most 50 atomic actions once nested sequences are
        inlined, and every one exists (400)."""
        if not components:
            raise bad_request(errors.SEQUENCE_NO_COMPONENT)
        if len(components) > MAX_SEQUENCE_LENGTH:
            raise bad_request(errors.SEQUENCE_TOO_LONG)
        paths = [parse_fqn(reference, path.namespace) for reference in components]
        for component in paths:
            self.access.use_action(path.namespace, component)
        self._count_atomic(path, paths)
        return [component.fqn for component in paths]

    def _count_atomic(self, sequence: EntityPath, components: list[EntityPath]) -> None:
        pending, atomic, visited = list(components), 0, 0
        while pending:
            visited += 1
            if visited > MAX_SEQUENCE_NODES:  # a chain of one-component sequences, or a cycle among them
                raise bad_request(errors.SEQUENCE_TOO_LONG)
            located = self._locate(pending.pop())
            if located == sequence:
                raise bad_request(errors.SEQUENCE_CYCLIC)
            entity = self.store.get(located.namespace, ACTIONS, located.relative) if located else None
            if entity is None:
                raise bad_request(errors.SEQUENCE_COMPONENT_NOT_FOUND)
            if entity.doc["exec"]["kind"] == "sequence":
                pending.extend(parse_fqn(c, located.namespace) for c in entity.doc["exec"]["components"])
            else:
                atomic += 1
            if atomic + len(pending) > MAX_SEQUENCE_LENGTH:
                raise bad_request(errors.SEQUENCE_TOO_LONG)

    def _locate(self, path: EntityPath) -> EntityPath | None:
        """Where the action ``path`` names lives, through a binding (no entitlement check)."""
        if path.package is None:
            return path
        package = self.store.get(path.namespace, PACKAGES, path.package)
        binding = package.doc.get("binding") if package else None
        return EntityPath(binding["namespace"], path.name, binding["name"]) if binding else path

    def get_action(self, caller: str, path: EntityPath, code: bool = True) -> dict[str, Any]:
        """The action (through a binding: the bound one) with its package's parameters under its own."""
        grant = self.access.use_action(caller, path)
        source = self._source(path, grant)
        entity = self.store.get(*source)
        if entity is None:
            raise absent(self.store, *source)
        doc = self._present(entity)
        if grant is not None:
            doc["parameters"] = _inherit(grant.parameters, doc.get("parameters"))
        if not code:
            doc["exec"].pop("code", None)
        return doc if source[0] == caller else without_web_secret(doc)

    @staticmethod
    def _source(path: EntityPath, grant: PackageGrant | None) -> tuple[str, str, str]:
        """The store key of the action ``path`` names, in the package ``grant`` gives access to."""
        if grant is None:
            return path.namespace, ACTIONS, path.relative
        return grant.source.namespace, ACTIONS, f"{grant.source.name}/{path.name}"

    def list_actions(self, caller: str, namespace: str, package: str | None, skip: int,
                     limit: int) -> list[dict[str, Any]]:
        """Actions of the caller's namespace (packaged ones too, as OpenWhisk lists them), or of a
        package the caller may read (a binding lists the bound package's actions)."""
        source_ns, prefix = self._listing(caller, namespace, package)
        listed = [self._summary(e) for e in self.store.list(source_ns, ACTIONS, prefix=prefix, skip=skip, limit=limit)]
        return listed if source_ns == caller else [without_web_secret(doc) for doc in listed]

    def count_actions(self, caller: str, namespace: str, package: str | None = None) -> int:
        source_ns, prefix = self._listing(caller, namespace, package)
        return self.store.count(source_ns, ACTIONS, prefix=prefix)

    def _listing(self, caller: str, namespace: str, package: str | None) -> tuple[str, str]:
        if package is None:
            if namespace != caller:
                raise forbidden(namespace)
            return namespace, ""
        grant = self.access.read_package(caller, namespace, package)
        return grant.source.namespace, f"{grant.source.name}/"

    def delete_action(self, caller: str, path: EntityPath) -> dict[str, Any]:
        self.access.change(caller, path)
        if path.package:
            self._require_package(path.namespace, path.package)
        entity = self.store.get(path.namespace, ACTIONS, path.relative)
        if entity is None or not entity_names.delete(self.store, path.namespace, ACTIONS, path.relative, entity.rev):
            raise absent(self.store, path.namespace, ACTIONS, path.relative)
        self._forget()
        self.platform.forget(str(path))
        return self._present(entity)

    def resolve(self, path: EntityPath, caller: str) -> ResolvedAction:
        """The action namespace ``caller`` invokes at ``path``, through a binding if the package is one,
        with the merged parameters; cached briefly. The caller decides entitlement, the container the
        activation may use and whether it gets the caller's key: always name the invoking namespace.

        For a sequence, the caller must be entitled to every component, as OpenWhisk checks."""
        cached = self.resolved(path, caller)
        if cached is not None:
            return cached
        grant = self.access.use_action(caller, path)
        namespace, _, relative = self._source(path, grant)
        entity = self.store.get(namespace, ACTIONS, relative)
        if entity is None:
            raise absent(self.store, namespace, ACTIONS, relative)
        located = EntityPath(namespace, path.name, grant.source.name if grant else None)
        inherited = grant.parameters if grant else []
        doc = self._present(entity)
        if doc["exec"]["kind"] == "sequence":
            for component in doc["exec"]["components"]:
                self.access.use_action(caller, parse_fqn(component, caller))
        parameters = _inherit(inherited, entity.doc.get("parameters"))
        resolved = ResolvedAction(
            located, doc, entity.rev, caller, params_dict(parameters, init=False), time.monotonic(),
            f"{path.namespace}/{path.package}" if grant and grant.is_binding else None, params_dict(parameters, init=True))
        with self._lock:
            self._resolved[(caller, path)] = resolved
        return resolved

    def resolved(self, path: EntityPath, caller: str) -> ResolvedAction | None:
        """:meth:`resolve` without I/O: the action if it was resolved lately, else None (call
        :meth:`resolve` on a thread then)."""
        cached = self._resolved.get((caller, path))
        if cached is not None and time.monotonic() - cached.resolved_at < RESOLVE_TTL_S:
            return cached
        return None

    def _forget(self) -> None:
        """An entity changed: resolve afresh (bindings make any change reach other paths)."""
        with self._lock:
            self._resolved.clear()

    # -- packages ----------------------------------------------------------
    def _require_package(self, namespace: str, name: str) -> dict[str, Any]:
        package = self.store.get(namespace, PACKAGES, name)
        if package is None:
            raise absent(self.store, namespace, PACKAGES, name)
        if package.doc.get("binding"):
            raise bad_request(errors.BINDING_NOT_ALLOWED)
        return package.doc

    def put_package(self, caller: str, namespace: str, name: str, body: PackageBody,
                    overwrite: bool) -> dict[str, Any]:
        self.access.change(caller, EntityPath(namespace, name))
        if name == DEFAULT_PACKAGE:
            raise bad_request(errors.PACKAGE_NAME_RESERVED.format(name=name))
        body.check_sizes()
        binding = self._binding(caller, body) if body.binding else None
        current = self.store.get(namespace, PACKAGES, name)
        if current and not overwrite:
            raise ApiError(409, errors.ALREADY_EXISTS)
        if current is None:
            check_free(self.store, namespace, PACKAGES, name)
        old = current.doc if current else {}
        if binding and current and not old.get("binding"):
            raise ApiError(409, errors.PACKAGE_CANNOT_BECOME_BINDING)
        binding = binding or old.get("binding") or {}
        parameters, annotations = _kv(body.parameters), _kv(body.annotations)
        annotations = [a for a in (annotations if annotations is not None else old.get("annotations", []))
                       if a["key"] != "binding"]
        if binding:
            annotations.append({"key": "binding", "value": binding})
        doc = {
            "namespace": namespace,
            "name": name,
            "version": next_version(body.version, old),
            "publish": body.publish if body.publish is not None else old.get("publish", False),
            "binding": binding,
            "parameters": parameters if parameters is not None else old.get("parameters", []),
            "annotations": annotations,
        }
        return self._present(self._put(namespace, PACKAGES, name, doc, current))

    def _binding(self, caller: str, body: PackageBody) -> dict[str, str]:
        """The package a binding refers to, if the caller may read it and it is not a binding."""
        assert body.binding is not None
        target_ns = caller if body.binding.namespace == "_" else body.binding.namespace
        try:
            grant = self.access.read_package(caller, target_ns, body.binding.name)
        except ApiError as exc:
            if exc.status == 404:
                raise bad_request(errors.PACKAGE_DOES_NOT_EXIST) from None
            if exc.status == 409:  # the name is another collection's: an action, a trigger, a rule
                raise ApiError(409, errors.BINDING_TO_NON_PACKAGE) from None
            raise
        if grant.is_binding:
            raise bad_request(errors.BINDING_TO_BINDING)
        return {"namespace": target_ns, "name": grant.entity.name}

    def get_package(self, caller: str, namespace: str, name: str) -> dict[str, Any]:
        """A package with its actions; a binding with the bound package's actions and its
        parameters over the bound package's."""
        grant = self.access.read_package(caller, namespace, name)
        doc = self._present(grant.entity)
        doc["parameters"] = grant.parameters
        actions = self.store.list(grant.source.namespace, ACTIONS, prefix=f"{grant.source.name}/")
        shown = [self._summary(e) if grant.source.namespace == caller else without_web_secret(self._summary(e))
                 for e in actions]
        doc["actions"] = [a for a in shown if annotation(a, "feed") is None]
        doc["feeds"] = [a for a in shown if annotation(a, "feed") is not None]
        return doc

    def list_packages(self, caller: str, namespace: str, skip: int, limit: int) -> list[dict[str, Any]]:
        """Packages and bindings of the caller's namespace; of another namespace, its published
        packages only (as OpenWhisk's public-packages view)."""
        if namespace == caller:
            return [self._package_summary(e) for e in self.store.list(namespace, PACKAGES, skip=skip, limit=limit)]
        shared = self._shared_packages(namespace)
        return [self._package_summary(e) for e in shared[skip:skip + limit if limit else None]]

    def count_packages(self, caller: str, namespace: str) -> int:
        if namespace == caller:
            return self.store.count(namespace, PACKAGES)
        return len(self._shared_packages(namespace))

    def _shared_packages(self, namespace: str) -> list[Entity]:
        return [e for e in self.store.list(namespace, PACKAGES) if e.doc.get("publish") and not e.doc.get("binding")]

    def delete_package(self, caller: str, namespace: str, name: str, force: bool = False) -> dict[str, Any]:
        self.access.change(caller, EntityPath(namespace, name))
        entity = self.store.get(namespace, PACKAGES, name)
        if entity is None:
            raise absent(self.store, namespace, PACKAGES, name)
        contents = [] if entity.doc.get("binding") else self.store.list(namespace, ACTIONS, prefix=f"{name}/")
        if contents and not force:
            entities = "entity" if len(contents) == 1 else "entities"
            raise ApiError(409, errors.PACKAGE_NOT_EMPTY.format(count=len(contents), entities=entities))
        for action in contents:
            entity_names.delete(self.store, namespace, ACTIONS, action.name, action.rev)
            self.platform.forget(f"{namespace}/{action.name}")
        entity_names.delete(self.store, namespace, PACKAGES, name, entity.rev)
        self._forget()
        return self._present(entity)

    # -- presentation ------------------------------------------------------
    @staticmethod
    def _present(entity: Entity) -> dict[str, Any]:
        doc = {key: (dict(value) if isinstance(value, dict) else value) for key, value in entity.doc.items()}
        doc["updated"] = entity.updated
        return doc

    @staticmethod
    def _brief(entity: Entity) -> dict[str, Any]:
        """What OpenWhisk's list views show of every entity."""
        doc = entity.doc
        return {"namespace": doc["namespace"], "name": doc["name"], "version": doc["version"],
                "publish": doc.get("publish", False), "annotations": doc.get("annotations", []),
                "updated": entity.updated}

    @classmethod
    def _summary(cls, entity: Entity) -> dict[str, Any]:
        """An action as OpenWhisk lists it: no code, no parameters."""
        return {**cls._brief(entity), "limits": entity.doc.get("limits", {}),
                "exec": {"binary": entity.doc["exec"].get("binary", False)}}

    @classmethod
    def _package_summary(cls, entity: Entity) -> dict[str, Any]:
        """A package as OpenWhisk lists it: no parameters; ``binding`` false or the bound package."""
        return {**cls._brief(entity), "binding": entity.doc.get("binding") or False}
