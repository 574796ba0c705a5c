"""Request bodies of the trigger and rule APIs, and how trigger and rule documents name entities."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, StrictStr, field_validator

from owx.gateway import errors
from owx.gateway.errors import bad_request
from owx.gateway.models import AnnotatedBody, EntityBody
from owx.gateway.names import EntityPath, parse_fqn

ACTIVE = "active"
NOT_FULLY_QUALIFIED = ("The fully qualified name of the entity must contain at least the namespace and the name of "
                       "the entity.")
INACTIVE = "inactive"
RuleStatus = Literal["active", "inactive"]


class TriggerBody(EntityBody):
    """Body of ``PUT .../triggers/NAME``; absent fields keep their values on update. Its
    ``limits`` are ignored: OpenWhisk's trigger limits have no fields, so a trigger stores ``{}``."""


class EntityRef(BaseModel):
    """A fully qualified name as OpenWhisk serialises it: ``{"path": "ns[/pkg]", "name": "n"}``."""

    model_config = ConfigDict(extra="ignore")
    path: StrictStr
    name: StrictStr


class RuleBody(AnnotatedBody):
    """Body of ``PUT .../rules/NAME``: the trigger and the action, as ``/ns/[pkg/]name`` or ``{path, name}``."""

    trigger: StrictStr | EntityRef | None = None
    action: StrictStr | EntityRef | None = None


class StatusBody(BaseModel):
    """Body of ``POST .../rules/NAME``: enable or disable."""

    model_config = ConfigDict(extra="ignore")
    status: StrictStr

    @field_validator("status")
    @classmethod
    def _known(cls, status: str) -> str:
        if status not in (ACTIVE, INACTIVE):
            raise ValueError(f"'{status}' is not a recognized rule state, must be one of ['{ACTIVE}', '{INACTIVE}']")
        return status


def resolve_ref(reference: str | EntityRef, namespace: str) -> EntityPath:
    """The entity a rule names, read as OpenWhisk reads a fully qualified name: its first segment is
    the namespace, with or without a leading ``/`` (``_``: ``namespace``); 400 if it has no namespace."""
    if isinstance(reference, EntityRef):
        reference = f"{reference.path}/{reference.name}"
    segments = [segment for segment in reference.split("/") if segment]
    if len(segments) < 2:
        raise bad_request(errors.MALFORMED.format(detail=NOT_FULLY_QUALIFIED))
    return parse_fqn("/" + "/".join(segments), namespace)


def ref_doc(path: EntityPath) -> dict[str, str]:
    """``{"path", "name"}`` of ``path``, as rule documents store trigger and action."""
    return {"path": f"{path.namespace}/{path.package}" if path.package else path.namespace, "name": path.name}


def ref_path(doc: dict[str, str]) -> EntityPath:
    """The inverse of :func:`ref_doc`."""
    namespace, _, package = doc["path"].partition("/")
    return EntityPath(namespace, doc["name"], package or None)


def ref_text(doc: dict[str, str]) -> str:
    """``ns/[pkg/]name``, as OpenWhisk writes a fully qualified name in messages and records."""
    return f"{doc['path']}/{doc['name']}"
