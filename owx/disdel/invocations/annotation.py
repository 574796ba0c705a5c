"""The ``disdel`` annotation of an action: which of its limits the gateway estimates.

``{"key": "disdel", "value": {"memory": "auto", "timeout": "auto"}}`` (either key alone estimates
that limit only); ``false`` or ``null`` opts out. An action being stored with any other value gets a
400 and nothing is stored, so a misspelt option is never silently ignored.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from owx.common.validation_errors import problems
from owx.gateway.catalog import annotation
from owx.gateway.errors import bad_request

ANNOTATION = "disdel"
AUTO = "auto"


class Estimated(BaseModel):
    """Which of an action's limits are estimated."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    memory: Literal["auto"] | None = None
    timeout: Literal["auto"] | None = None

    @classmethod
    def of(cls, doc: dict[str, Any]) -> Estimated:
        """What an action's annotation asks for; nothing for a value that cannot be read (stored
        before it was checked)."""
        value = annotation(doc, ANNOTATION)
        try:
            return cls.model_validate(value) if isinstance(value, dict) else cls()
        except ValidationError:
            return cls()

    @property
    def any(self) -> bool:
        return self.memory == AUTO or self.timeout == AUTO


def check_action(doc: dict[str, Any]) -> None:
    """An action as it would be stored: a ``disdel`` annotation other than an object of ``"auto"``
    limits, ``false`` or ``null`` is a 400."""
    value = annotation(doc, ANNOTATION, False)
    if value in (False, None):
        return
    if not isinstance(value, dict):
        raise bad_request(f"annotation 'disdel' must be an object such as {{\"memory\": \"auto\"}}, got {value!r:.80}")
    try:
        Estimated.model_validate(value)
    except ValidationError as exc:
        raise bad_request(f"annotation 'disdel' is invalid: {problems(exc)}") from None
