"""Reading query parameters, bodies and the caller from the current request."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

from flask import Response, current_app, g, jsonify, request
from pydantic import BaseModel, ValidationError

from owx.gateway import errors
from owx.gateway.errors import ApiError, bad_request, forbidden, too_big
from owx.gateway.identity import Identity
from owx.common.jsonvalues import InvalidJson, loads
from owx.common.validation_errors import problems
from owx.gateway.names import check_namespace
from owx.gateway.service import Gateway

Model = TypeVar("Model", bound=BaseModel)
LIST_DEFAULT_LIMIT = 30
LIST_MAX_LIMIT = 200
INT_RANGE = (-(2**31), 2**31 - 1)  # Java's Int: skip and limit
LONG_RANGE = (-(2**63), 2**63 - 1)  # Java's Long: since and upto (epoch ms)
_INTEGER = re.compile(r"[+-]?[0-9]{1,20}", re.ASCII)
_TRUE, _FALSE = frozenset({"true", "yes", "on", "1"}), frozenset({"false", "no", "off", "0"})


def gateway() -> Gateway:
    return current_app.extensions["owx"]


def caller() -> Identity:
    """The authenticated caller (401 otherwise); cached on the request."""
    if "identity" not in g:
        g.identity = gateway().auth.identify(request.headers.get("Authorization"))
    return g.identity


def any_namespace(requested: str) -> str:
    """The namespace in the path (``_``: the caller's), checked as a name; entitlement is the caller's job."""
    identity = caller()
    return identity.namespace if requested == "_" else check_namespace(requested)


def namespace(requested: str) -> str:
    """The namespace in the path, ``_`` meaning the caller's; 403 for somebody else's."""
    resolved = any_namespace(requested)
    if resolved != caller().namespace:
        raise forbidden(resolved)
    return resolved


def flag(name: str, default: bool = False) -> bool:
    """A boolean query parameter, parsed case-insensitively as OpenWhisk does."""
    return boolean(name, request.args.get(name), default)


def boolean(name: str, raw: str | None, default: bool = False) -> bool:
    """Query parameter ``name``'s value ``raw`` (None: absent) as OpenWhisk reads a boolean: true,
    yes, on, 1 or false, no, off, 0 in any case; 400 otherwise."""
    if raw is None or raw == "":
        return default
    lowered = raw.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise malformed_query(name, f"'{raw}' is not a valid Boolean value")


def malformed_query(name: str, detail: str) -> ApiError:
    """400 for query parameter ``name``, worded as OpenWhisk's parameter directives word it."""
    return bad_request(errors.MALFORMED_QUERY.format(name=name, detail=detail))


def wait_timeout_s(raw: str | None, max_s: float) -> float:
    """Query parameter ``timeout`` of an invoke as OpenWhisk reads it: how long a blocking caller
    waits, in milliseconds from 1 up to ``max_s`` (the configured wait); ``max_s`` when absent; 400
    otherwise (OpenWhisk's message, an empty value included)."""
    if raw is None:
        return max_s
    max_ms = int(max_s * 1000)
    if _INTEGER.fullmatch(raw) and 0 < int(raw) <= max_ms:
        return int(raw) / 1000
    raise malformed_query("timeout", errors.INVALID_TIMEOUT.format(max_ms=max_ms))


def integer(name: str, bounds: tuple[int, int], invalid: Callable[[str], str]) -> int | None:
    """Query parameter ``name`` as an integer within ``bounds`` (ASCII digits, as Java parses
    them); None when absent; 400 with the message ``invalid(raw)`` otherwise."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return None
    if _INTEGER.fullmatch(raw) and bounds[0] <= int(raw) <= bounds[1]:
        return int(raw)
    raise malformed_query(name, invalid(raw))


def paging(collection: str) -> tuple[int, int]:
    """(skip, limit) of a list request, validated against OpenWhisk's bounds."""
    def not_integer(raw: str) -> str:
        return errors.NOT_INTEGER.format(value=raw, collection=collection)

    skip = integer("skip", INT_RANGE, not_integer) or 0
    limit = integer("limit", INT_RANGE, not_integer)
    limit = LIST_DEFAULT_LIMIT if limit is None else limit
    if skip < 0:
        raise malformed_query("skip", errors.SKIP_OUT_OF_RANGE.format(value=skip, collection=collection))
    if not 0 <= limit <= LIST_MAX_LIMIT:
        raise malformed_query("limit", errors.LIMIT_OUT_OF_RANGE.format(value=limit, max=LIST_MAX_LIMIT,
                                                                        collection=collection))
    return skip, limit or LIST_MAX_LIMIT


def listing(collection: str, count: Callable[[], int], page: Callable[[int, int], list[Any]]) -> Response:
    """A list endpoint's answer: the page ``skip``/``limit`` ask for, or with ``count=true`` how many
    entities there are past ``skip`` (as OpenWhisk counts)."""
    skip, limit = paging(collection)
    if flag("count"):
        return jsonify({collection: max(0, count() - skip)})
    return jsonify(page(skip, limit))


def body_bytes(max_bytes: int | None = None) -> bytes:
    """The request body; 413 with OpenWhisk's message when it is longer than ``max_bytes``
    (counted as read, so a chunked body without Content-Length is held to it too)."""
    return bounded(request.get_data(cache=True), max_bytes)


def bounded(raw: bytes, max_bytes: int | None) -> bytes:
    """``raw``, or 413 with OpenWhisk's message when it is longer than ``max_bytes``."""
    if max_bytes is not None and len(raw) > max_bytes:
        raise too_big("Request", len(raw), max_bytes)
    return raw


def json_value(raw: bytes) -> Any:
    """``raw`` parsed as JSON owx accepts (`owx.gateway.jsonvalues`); 400 with the reason otherwise."""
    try:
        return loads(raw)
    except InvalidJson as exc:
        raise bad_request(errors.MALFORMED.format(detail=exc)) from None


def json_object(max_bytes: int | None = None) -> dict[str, Any]:
    """The body as a JSON object (``{}`` when empty); 400 when malformed, 413 when longer than
    ``max_bytes``."""
    return object_from(body_bytes(max_bytes))


def object_from(raw: bytes) -> dict[str, Any]:
    """The request body ``raw`` as a JSON object, ``{}`` when empty (as OpenWhisk reads one); 400 otherwise."""
    if not raw.strip():
        return {}
    body = json_value(raw)
    if not isinstance(body, dict):
        raise bad_request(errors.MALFORMED.format(detail="expected a JSON object"))
    return body


def entity_body(model_type: type[Model]) -> Model:
    """:func:`model` of an entity write, its bytes charged to the caller's namespace first (429 past
    its budget: see :mod:`owx.gateway.write_budget`)."""
    gateway().entity_writes.charge(caller().namespace, request.content_length or 0)  # the server's count, exact
    return model(model_type)


def model(model_type: type[Model]) -> Model:
    """The body validated as ``model_type``; pydantic's complaint becomes the 400 message."""
    try:
        return model_type.model_validate(json_object())
    except ValidationError as exc:
        raise bad_request(errors.MALFORMED.format(detail=problems(exc, whole="body"))) from None
