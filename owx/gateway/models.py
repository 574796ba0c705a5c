"""Request bodies of the REST API (pydantic), validated before anything is stored."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, field_validator

PYTHON_KINDS = ("python:3", "python:3.11", "python:default", "python:tensorflow")
KINDS = (*PYTHON_KINDS, "blackbox", "sequence")
MAX_SEQUENCE_LENGTH = 50


class KeyValue(BaseModel):
    """One parameter or annotation, as OpenWhisk's ``{key, value}`` arrays hold them."""

    model_config = ConfigDict(extra="forbid")
    key: StrictStr = Field(min_length=1, max_length=256)
    value: Any = None


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
        if kind not in KINDS:
            raise ValueError(f"kind '{kind}' is not supported; supported kinds: {', '.join(KINDS)}")
        return kind


class LimitsBody(BaseModel):
    """Per-action limits; absent fields keep their current (or default) value."""

    model_config = ConfigDict(extra="forbid")
    timeout: StrictInt | None = None
    memory: StrictInt | None = None
    logs: StrictInt | None = None
    concurrency: StrictInt | None = None


class ActionBody(BaseModel):
    """Body of ``PUT .../actions/[pkg/]name``."""

    model_config = ConfigDict(extra="ignore")
    exec: ExecBody | None = None
    parameters: list[KeyValue] | None = None
    annotations: list[KeyValue] | None = None
    limits: LimitsBody | None = None
    version: StrictStr | None = None
    publish: StrictBool | None = None


class BindingBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    namespace: StrictStr
    name: StrictStr


class PackageBody(BaseModel):
    """Body of ``PUT .../packages/name``."""

    model_config = ConfigDict(extra="ignore")
    parameters: list[KeyValue] | None = None
    annotations: list[KeyValue] | None = None
    version: StrictStr | None = None
    publish: StrictBool | None = None
    binding: BindingBody | dict | None = None


Method = Literal["get", "post", "put", "delete", "patch", "head", "options"]
