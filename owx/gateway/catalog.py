"""Actions and packages: OpenWhisk's create/update/merge rules over the EntityStore."""

from __future__ import annotations

import base64
import binascii
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from owx.gateway import errors
from owx.gateway.action_limits import effective, merge_limits
from owx.gateway.errors import ApiError, bad_request, not_found
from owx.gateway.models import MAX_SEQUENCE_LENGTH, PYTHON_KINDS, ActionBody, ExecBody, KeyValue, PackageBody
from owx.gateway.names import EntityPath, parse_fqn
from owx.gateway.settings import ActionLimits
from owx.gateway.stores import Conflict, Entity, EntityStore
from owx.platform import Platform

ACTIONS = "actions"
PACKAGES = "packages"
RESOLVE_TTL_S = 2.0  # how long an invocation may see an action another gateway changed


def _kv(items: list[KeyValue] | None) -> list[dict[str, Any]] | None:
    return None if items is None else [item.model_dump() for item in items]


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


def params_dict(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {item["key"]: item.get("value") for item in items or ()}


def _looks_like_zip(code: str) -> bool:
    try:
        return base64.b64decode(code[:8], validate=True).startswith(b"PK")
    except (binascii.Error, ValueError):
        return False


def _bump(version: str) -> str:
    parts = version.split(".")
    if len(parts) == 3 and all(p.isdigit() for p in parts):
        return f"{parts[0]}.{parts[1]}.{int(parts[2]) + 1}"
    return "0.0.1"


@dataclass(frozen=True)
class ResolvedAction:
    """An action ready to invoke: its record, store revision and effective parameters."""

    path: EntityPath
    doc: dict[str, Any]
    rev: str
    parameters: dict[str, Any] = field(default_factory=dict)
    resolved_at: float = 0.0

    @property
    def kind(self) -> str:
        return self.doc["exec"]["kind"]

    @property
    def limits(self) -> dict[str, int]:
        return self.doc["limits"]


class Catalog:
    """Create, read, update, list and delete actions and packages of a namespace."""

    def __init__(self, store: EntityStore, limits: ActionLimits, platform: Platform) -> None:
        self.store = store
        self.configured_limits = limits
        self.platform = platform
        self._resolved: dict[str, ResolvedAction] = {}
        self._lock = threading.Lock()

    @property
    def limits(self) -> ActionLimits:
        """The limits actions may ask for: the configured ones, within what the platform can hold."""
        return effective(self.configured_limits, self.platform.limits())

    # -- actions -----------------------------------------------------------
    def put_action(self, path: EntityPath, body: ActionBody, overwrite: bool) -> dict[str, Any]:
        if path.package:
            self._require_package(path.namespace, path.package)
        current = self.store.get(path.namespace, ACTIONS, path.relative)
        if current and not overwrite:
            raise ApiError(409, errors.ALREADY_EXISTS)
        if current is None and body.exec is None:
            raise bad_request("The request content was malformed:\nexec undefined")
        doc = self._merge_action(path, body, current.doc if current else None)
        try:
            saved = self.store.put(path.namespace, ACTIONS, path.relative, doc, current.rev if current else None)
        except Conflict:
            raise ApiError(409, errors.CONFLICT if current else errors.ALREADY_EXISTS) from None
        self._forget(path)
        if current is not None:
            self.platform.forget(str(path))
        return self._present(saved)

    def _merge_action(self, path: EntityPath, body: ActionBody, current: dict[str, Any] | None) -> dict[str, Any]:
        exec_doc = self._exec(path, body.exec) if body.exec else dict(current["exec"])  # type: ignore[index]
        annotations = _kv(body.annotations)
        if annotations is None:
            annotations = [dict(a) for a in (current or {}).get("annotations", [])]
        _set_annotation(annotations, "exec", exec_doc["kind"])
        _set_annotation(annotations, "provide-api-key", False, keep=True)
        parameters = _kv(body.parameters)
        return {
            "namespace": f"{path.namespace}/{path.package}" if path.package else path.namespace,
            "name": path.name,
            "version": _bump(current["version"]) if current else "0.0.1",
            "publish": body.publish if body.publish is not None else (current or {}).get("publish", False),
            "exec": exec_doc,
            "annotations": annotations,
            "parameters": parameters if parameters is not None else (current or {}).get("parameters", []),
            "limits": merge_limits((current or {}).get("limits"), body.limits, self.limits),
        }

    def _exec(self, path: EntityPath, body: ExecBody) -> dict[str, Any]:
        unsupported = self.platform.unsupported(body.kind) if body.kind != "sequence" else None
        if unsupported:
            raise bad_request(unsupported)
        if body.kind in PYTHON_KINDS:
            if not body.code:
                raise bad_request("The request content was malformed:\nexec.code undefined")
            binary = body.binary if body.binary is not None else _looks_like_zip(body.code)
            return {"kind": body.kind, "code": body.code, "binary": binary, "main": body.main or "main"}
        if body.kind == "blackbox":
            if not body.image:
                raise bad_request("The request content was malformed:\nexec.image undefined")
            doc: dict[str, Any] = {"kind": "blackbox", "image": body.image, "binary": bool(body.binary)}
            if body.code:
                doc.update(code=body.code, main=body.main or "main")
            return doc
        return {"kind": "sequence", "components": self._components(path, body.components), "binary": False}

    def _components(self, path: EntityPath, components: list[str] | None) -> list[str]:
        if not components:
            raise bad_request(errors.SEQUENCE_NO_COMPONENT)
        if len(components) > MAX_SEQUENCE_LENGTH:
            raise bad_request(errors.SEQUENCE_TOO_LONG)
        resolved = []
        for reference in components:
            component = parse_fqn(reference, path.namespace)
            if component == path:
                raise bad_request(errors.SEQUENCE_CYCLIC)
            if self.store.get(component.namespace, ACTIONS, component.relative) is None:
                raise bad_request(errors.SEQUENCE_COMPONENT_NOT_FOUND)
            resolved.append(component.fqn)
        return resolved

    def get_action(self, path: EntityPath, code: bool = True) -> dict[str, Any]:
        entity = self.store.get(path.namespace, ACTIONS, path.relative)
        if entity is None:
            raise not_found()
        doc = self._present(entity)
        if not code:
            doc["exec"].pop("code", None)
        return doc

    def list_actions(self, namespace: str, package: str | None, skip: int, limit: int) -> list[dict[str, Any]]:
        prefix = f"{package}/" if package else ""
        entities = self.store.list(namespace, ACTIONS, prefix=prefix, skip=skip, limit=limit)
        return [self._summary(e) for e in entities if package or "/" not in e.name]

    def count_actions(self, namespace: str, package: str | None = None) -> int:
        if package:
            return self.store.count(namespace, ACTIONS, prefix=f"{package}/")
        return sum(1 for e in self.store.list(namespace, ACTIONS) if "/" not in e.name)

    def delete_action(self, path: EntityPath) -> dict[str, Any]:
        entity = self.store.get(path.namespace, ACTIONS, path.relative)
        if entity is None or not self.store.delete(path.namespace, ACTIONS, path.relative, entity.rev):
            raise not_found()
        self._forget(path)
        self.platform.forget(str(path))
        return self._present(entity)

    def resolve(self, path: EntityPath) -> ResolvedAction:
        """The action to invoke, with package parameters under its own (cached briefly)."""
        key = str(path)
        cached = self._resolved.get(key)
        if cached and time.monotonic() - cached.resolved_at < RESOLVE_TTL_S:
            return cached
        entity = self.store.get(path.namespace, ACTIONS, path.relative)
        if entity is None:
            raise not_found()
        parameters = {}
        if path.package:
            package = self.store.get(path.namespace, PACKAGES, path.package)
            parameters.update(params_dict(package.doc.get("parameters")) if package else {})
        parameters.update(params_dict(entity.doc.get("parameters")))
        resolved = ResolvedAction(path, self._present(entity), entity.rev, parameters, time.monotonic())
        with self._lock:
            self._resolved[key] = resolved
        return resolved

    def _forget(self, path: EntityPath) -> None:
        with self._lock:
            if path.name == "*":
                prefix = f"{path.namespace}/{path.package}/"
                for key in [k for k in self._resolved if k.startswith(prefix)]:
                    del self._resolved[key]
            else:
                self._resolved.pop(str(path), None)

    # -- packages ----------------------------------------------------------
    def _require_package(self, namespace: str, name: str) -> dict[str, Any]:
        package = self.store.get(namespace, PACKAGES, name)
        if package is None:
            raise not_found()
        if package.doc.get("binding"):
            raise bad_request(errors.BINDING_NOT_ALLOWED)
        return package.doc

    def put_package(self, namespace: str, name: str, body: PackageBody, overwrite: bool) -> dict[str, Any]:
        current = self.store.get(namespace, PACKAGES, name)
        if current and not overwrite:
            raise ApiError(409, errors.ALREADY_EXISTS)
        old = current.doc if current else {}
        binding = self._binding(namespace, body) if body.binding else old.get("binding", {})
        parameters, annotations = _kv(body.parameters), _kv(body.annotations)
        doc = {
            "namespace": namespace,
            "name": name,
            "version": _bump(old["version"]) if current else "0.0.1",
            "publish": body.publish if body.publish is not None else old.get("publish", False),
            "binding": binding,
            "parameters": parameters if parameters is not None else old.get("parameters", []),
            "annotations": annotations if annotations is not None else old.get("annotations", []),
        }
        try:
            saved = self.store.put(namespace, PACKAGES, name, doc, current.rev if current else None)
        except Conflict:
            raise ApiError(409, errors.CONFLICT) from None
        self._forget(EntityPath(namespace, "*", name))
        return self._present(saved)

    def _binding(self, namespace: str, body: PackageBody) -> dict[str, str]:
        binding = body.binding if isinstance(body.binding, dict) else body.binding.model_dump()  # type: ignore[union-attr]
        if not binding:
            return {}
        target_ns = binding.get("namespace") or namespace
        target_ns = namespace if target_ns == "_" else target_ns
        target = self.store.get(target_ns, PACKAGES, str(binding.get("name", "")))
        if target is None:
            raise bad_request(errors.PACKAGE_DOES_NOT_EXIST)
        return {"namespace": target_ns, "name": target.name}

    def get_package(self, namespace: str, name: str) -> dict[str, Any]:
        entity = self.store.get(namespace, PACKAGES, name)
        if entity is None:
            raise not_found()
        doc = self._present(entity)
        source_ns, source = namespace, name
        if doc.get("binding"):
            source_ns, source = doc["binding"]["namespace"], doc["binding"]["name"]
        doc["actions"] = [self._summary(e) for e in self.store.list(source_ns, ACTIONS, prefix=f"{source}/")]
        doc["feeds"] = []
        return doc

    def list_packages(self, namespace: str, skip: int, limit: int) -> list[dict[str, Any]]:
        return [self._present(e) for e in self.store.list(namespace, PACKAGES, skip=skip, limit=limit)]

    def count_packages(self, namespace: str) -> int:
        return self.store.count(namespace, PACKAGES)

    def delete_package(self, namespace: str, name: str, force: bool = False) -> dict[str, Any]:
        entity = self.store.get(namespace, PACKAGES, name)
        if entity is None:
            raise not_found()
        contents = self.store.list(namespace, ACTIONS, prefix=f"{name}/")
        if contents and not force:
            entities = "entity" if len(contents) == 1 else "entities"
            raise ApiError(409, errors.PACKAGE_NOT_EMPTY.format(count=len(contents), entities=entities))
        for action in contents:
            self.store.delete(namespace, ACTIONS, action.name, action.rev)
            self.platform.forget(f"{namespace}/{action.name}")
        self.store.delete(namespace, PACKAGES, name, entity.rev)
        self._forget(EntityPath(namespace, "*", name))
        return self._present(entity)

    # -- presentation ------------------------------------------------------
    @staticmethod
    def _present(entity: Entity) -> dict[str, Any]:
        doc = {key: (dict(value) if isinstance(value, dict) else value) for key, value in entity.doc.items()}
        doc["updated"] = entity.updated
        return doc

    @staticmethod
    def _summary(entity: Entity) -> dict[str, Any]:
        doc = entity.doc
        return {
            "namespace": doc["namespace"],
            "name": doc["name"],
            "version": doc["version"],
            "publish": doc.get("publish", False),
            "annotations": doc.get("annotations", []),
            "limits": doc.get("limits", {}),
            "exec": {"binary": doc["exec"].get("binary", False)},
            "updated": entity.updated,
        }
