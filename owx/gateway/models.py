"""Request bodies of the REST API (pydantic), validated before anything is stored."""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)

from owx.common.jsonvalues import encoded_size
from owx.gateway import versions
from owx.gateway.errors import UNSUPPORTED_KIND, ApiError, too_big
from owx.gateway.names import check_name, check_namespace
from owx.gateway.stores import MAX_DOC_BYTES
from owx.platform.types import PYTHON_KINDS

KINDS = (*PYTHON_KINDS, "blackbox", "sequence")
MAX_SEQUENCE_LENGTH = 50
MB = 1024 * 1024
#: OpenWhisk's parameter-size-limit, for parameters and for annotations.
PARAMETER_SIZE_LIMIT = 1 * MB
#: The largest ``exec`` (code included) whose action document still fits a store's document
#: limit next to the largest parameters and annotations (OpenWhisk allows 48 MB; owx's stores
#: hold 16 MB documents).
EXEC_SIZE_LIMIT = MAX_DOC_BYTES - 2 * PARAMETER_SIZE_LIMIT - 1 * MB


class KeyValue(BaseModel):
    """One parameter or annotation, as OpenWhisk's ``{key, value}`` arrays hold them (other fields a
    client sends, such as ``description``, are ignored, as OpenWhisk ignores them)."""

    model_config = ConfigDict(extra="ignore")
    key: StrictStr = Field(min_length=1, max_length=256)
    value: Any  # required, as OpenWhisk's ("parameters malformed!" without it); null is a value
    init: StrictBool = False  # a parameter the runtime gets at /init as environment, not as an argument

    def entry(self) -> dict[str, Any]:
        return stored_entry(self.key, self.value, self.init)


def stored_entry(key: str, value: Any, init: bool) -> dict[str, Any]:
    """A ``{key, value}`` entry as stored and shown: ``init`` only when set, as OpenWhisk shows it."""
    return {"key": key, "value": value, **({"init": True} if init else {})}


# A Docker image reference, as OpenWhisk parses a blackbox action's image (Docker's grammar: an
# optional registry with a dot or a port, lower-case path components, an optional tag and digest)
_DOMAIN_PART = r"[a-zA-Z0-9-]+"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REFERENCE = re.compile(
    rf"(?:(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})+(?::[0-9]+)?|{_DOMAIN_PART}:[0-9]+)/)?"
    rf"{_PATH_PART}(?:/{_PATH_PART})*"
    r"(?::\w[\w.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?", re.ASCII)


class ExecBody(BaseModel):
    """``exec``: what the action runs."""

    model_config = ConfigDict(extra="ignore")
    kind: StrictStr
    code: StrictStr | None = None
    binary: StrictBool | None = None
    main: StrictStr | None = None
    image: StrictStr | None = None
    components: list[StrictStr] | None = None

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        kind = kind.strip().lower()  # as OpenWhisk reads it
        if kind not in KINDS:
            raise ValueError(UNSUPPORTED_KIND.format(kind=kind, kinds=", ".join(f"'{k}'" for k in KINDS)))
        return kind

    @field_validator("image")
    @classmethod
    def _image_reference(cls, image: str | None) -> str | None:
        if image is not None and not IMAGE_REFERENCE.fullmatch(image):
            raise ValueError("could not parse image name")
        return image


class LimitsBody(BaseModel):
    """Per-action limits; absent fields keep their current (or default) value; others (OpenWhisk's
    ``instances``, which only its newer scheduler reads) are ignored, as OpenWhisk ignores unknown ones."""

    model_config = ConfigDict(extra="ignore")
    timeout: StrictInt | None = None
    memory: StrictInt | None = None
    logs: StrictInt | None = None
    concurrency: StrictInt | None = None


def last_of_each_key(items: list[KeyValue] | None) -> list[KeyValue] | None:
    """One entry per key, the last one given, where the key first stood (OpenWhisk keeps them in a map)."""
    if items is None:
        return None
    kept: dict[str, KeyValue] = {}
    for item in items:
        kept[item.key] = item
    return list(kept.values())


def _entries_size(items: Any) -> int | None:
    """Bytes a raw ``{key, value}`` array will take as stored (one entry per key, as
    :func:`last_of_each_key` keeps them); None when it is not such an array (validation says why)."""
    if not isinstance(items, list):
        return None
    kept: dict[str, dict[str, Any]] = {}
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("key"), str) or "value" not in item:
            return None
        kept[item["key"]] = stored_entry(item["key"], item["value"], item.get("init") is True)
    return encoded_size(list(kept.values()))


def _check_size(field: str, value: Any, allowed: int) -> None:
    if value is not None:
        size = encoded_size(value.model_dump(exclude_none=True) if isinstance(value, BaseModel)
                            else [item.entry() for item in value])
        if size > allowed:
            raise too_big(field, size, allowed)


class AnnotatedBody(BaseModel):
    """What every entity's PUT body carries (a rule's has no more of these)."""

    model_config = ConfigDict(extra="ignore")
    annotations: list[KeyValue] | None = None
    version: StrictStr | None = None
    publish: StrictBool | None = None
    _KEY_VALUE_FIELDS: ClassVar[tuple[str, ...]] = ("annotations",)

    @model_validator(mode="before")
    @classmethod
    def _key_values_within_limit(cls, body: Any) -> Any:
        """A ``{key, value}`` array past its limit is a 413 before its entries are validated (the
        megabytes a body may carry would be hundreds of thousands of entries: seconds of the GIL)."""
        if isinstance(body, dict):
            for field in cls._KEY_VALUE_FIELDS:
                size = _entries_size(body.get(field))
                if size is not None and size > PARAMETER_SIZE_LIMIT:
                    raise too_big(field, size, PARAMETER_SIZE_LIMIT)
        return body

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, items: list[KeyValue] | None) -> list[KeyValue] | None:
        return last_of_each_key(items)

    @field_validator("version")
    @classmethod
    def _version(cls, version: str | None) -> str | None:
        return None if version is None else versions.parse(version)

    def check_sizes(self) -> None:
        """413 with OpenWhisk's message when a field is larger than its limit (sizes as stored JSON)."""
        _check_size("annotations", self.annotations, PARAMETER_SIZE_LIMIT)


class EntityBody(AnnotatedBody):
    """What actions, packages and triggers carry."""

    parameters: list[KeyValue] | None = None
    _KEY_VALUE_FIELDS: ClassVar[tuple[str, ...]] = ("parameters", "annotations")

    @field_validator("parameters")
    @classmethod
    def _parameters(cls, items: list[KeyValue] | None) -> list[KeyValue] | None:
        return last_of_each_key(items)

    def check_sizes(self) -> None:
        _check_size("parameters", self.parameters, PARAMETER_SIZE_LIMIT)
        super().check_sizes()


class ActionBody(EntityBody):
    """Body of ``PUT .../actions/[pkg/]name``; ``delAnnotations``: keys to drop on update."""

    exec: ExecBody | None = None
    limits: LimitsBody | None = None
    delAnnotations: list[StrictStr] | None = None

    def check_sizes(self) -> None:
        _check_size("exec", self.exec, EXEC_SIZE_LIMIT)
        super().check_sizes()


class BindingBody(BaseModel):
    """The package a binding refers to (``namespace`` ``_``: the caller's)."""

    model_config = ConfigDict(extra="ignore")
    namespace: StrictStr
    name: StrictStr

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, namespace: str) -> str:
        return namespace if namespace == "_" else _entity_name(check_namespace, namespace)

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        return _entity_name(check_name, name)


def _entity_name(check: Any, name: str) -> str:
    """``check(name)``, its 400 turned into a validation error so it reads as a malformed field."""
    try:
        return check(name)
    except ApiError as exc:
        raise ValueError(exc.message) from None


class PackageBody(EntityBody):
    """Body of ``PUT .../packages/name``; ``binding: {}`` means no binding, as in OpenWhisk."""

    binding: BindingBody | None = None

    @field_validator("binding", mode="before")
    @classmethod
    def _empty_binding(cls, binding: Any) -> Any:
        return None if binding == {} else binding


Method = Literal["get", "post", "put", "delete", "patch", "head", "options"]
