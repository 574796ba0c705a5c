"""What every activation store derives from an OpenWhisk activation record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from owx.gateway.stores.base import InvalidInput
from owx.gateway.stores.validation import check_activation_id, check_field, check_namespace, encode_doc

#: ``response.status`` -> the ``statusCode`` OpenWhisk puts in activation summaries.
STATUS_CODES = {"success": 0, "application error": 1, "action developer error": 2, "whisk internal error": 3}

_INTERNAL_ERROR = STATUS_CODES["whisk internal error"]

_SUMMARY_FIELDS = ("namespace", "name", "version", "publish", "annotations", "activationId", "start", "cause")


@dataclass(frozen=True)
class ActivationRow:
    """A validated record ready to write: its index fields and its JSON text."""

    activation_id: str
    namespace: str
    name: str  # the filter name: ``pkg/action`` for packaged actions, else the action name
    start: int
    text: str
    outsider: bool = False  # of a web action's caller other than its owner: trimmed first (`retention`)


@dataclass(frozen=True)
class AcceptedRow:
    """An activation answered for (202 or about to run) but not recorded yet: after a crash, the
    next start records it as failed from this entry (a JSON object: namespace, name, path, ...)."""

    activation_id: str
    namespace: str
    text: str


Row = Union[ActivationRow, AcceptedRow]


def to_accepted(entry: dict[str, Any]) -> AcceptedRow:
    """Validate an accepted-activation entry (``activationId``, ``namespace`` required)."""
    activation_id = check_activation_id(entry.get("activationId"))
    return AcceptedRow(activation_id, check_namespace(entry.get("namespace")), encode_doc(entry, "accepted activation"))


def annotation_values(doc: dict[str, Any]) -> dict[Any, Any]:
    """A record's annotations as ``{key: value}`` (the last of a repeated key; an annotation that is
    not a ``{"key": ...}`` object, or whose key is not a string, left out)."""
    annotations = doc.get("annotations") or ()
    try:  # what records hold: {"key", "value"} objects, read without a call per annotation
        return {annotation["key"]: annotation["value"] for annotation in annotations}
    except (TypeError, KeyError):  # a record written by someone else: what can be read of it
        return {annotation["key"]: annotation.get("value") for annotation in annotations
                if isinstance(annotation, dict) and isinstance(annotation.get("key"), str)}


def filter_name(doc: dict[str, Any]) -> str:
    """The name `ActivationStore.list(name=...)` matches, as OpenWhisk's filter view keys it:
    ``binding/action`` for an action invoked through a binding (annotation ``binding`` =
    ``ns/binding``), ``pkg/action`` for a packaged one (``path`` = ``ns/pkg/action``), else
    ``doc["name"]``."""
    values = annotation_values(doc)
    binding, path = values.get("binding"), values.get("path")
    for value, length in ((binding, 2), (path, 3)):
        parts = value.split("/") if isinstance(value, str) else []
        if len(parts) == length and all(parts):
            return f"{parts[1]}/{doc['name']}"
    return doc["name"]


def to_row(doc: object, outsider: bool = False) -> ActivationRow:
    """Validate a record and snapshot it; raises `InvalidInput` naming the bad field."""
    if not isinstance(doc, dict):
        raise InvalidInput(f"activation record must be a JSON object, got {type(doc).__name__}")
    activation_id = check_activation_id(doc.get("activationId"))
    namespace = check_namespace(doc.get("namespace"))
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"activation name must be a non-empty string, got {name!r:.80}")
    start = doc.get("start")
    if not isinstance(start, int) or isinstance(start, bool) or start < 0:
        raise InvalidInput(f"activation start must be epoch milliseconds (int), got {start!r:.80}")
    text = encode_doc(doc, "activation record")
    return ActivationRow(activation_id, namespace, check_field(filter_name(doc), "activation name"), start, text,
                         outsider)


def summary(doc: dict[str, Any]) -> dict[str, Any]:
    """OpenWhisk's list view of a record: no ``response`` and no ``logs``; ``end``,
    ``duration`` and ``statusCode`` once the activation has ended."""
    out = {key: doc[key] for key in _SUMMARY_FIELDS if key in doc}
    end = doc.get("end")
    if isinstance(end, int) and end > 0:
        out["end"] = end
        out["duration"] = doc.get("duration", end - doc["start"])
        out["statusCode"] = status_code(doc.get("response"))
    return out


def status_code(response: object) -> int:
    """0 success, 1 application error, 2 developer error, 3 whisk internal error."""
    if not isinstance(response, dict):
        return _INTERNAL_ERROR
    code, status = response.get("statusCode"), response.get("status")
    if isinstance(code, int):
        return code
    return STATUS_CODES.get(status, _INTERNAL_ERROR) if isinstance(status, str) else _INTERNAL_ERROR
