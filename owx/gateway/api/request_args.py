"""Reading query parameters, bodies and the caller from the current request."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from flask import Response, current_app, g, jsonify, request
from pydantic import BaseModel, ValidationError

from owx.gateway import errors
from owx.gateway.errors import ApiError, bad_request
from owx.gateway.identity import Identity
from owx.gateway.service import Gateway

Model = TypeVar("Model", bound=BaseModel)
LIST_DEFAULT_LIMIT = 30
LIST_MAX_LIMIT = 200


def gateway() -> Gateway:
    return current_app.extensions["owx"]


def caller() -> Identity:
    """The authenticated caller (401 otherwise); cached on the request."""
    if "identity" not in g:
        g.identity = gateway().auth.identify(request.headers.get("Authorization"))
    return g.identity


def namespace(requested: str) -> str:
    """The namespace in the path, ``_`` meaning the caller's; 403 for somebody else's."""
    identity = caller()
    if requested in ("_", identity.namespace):
        return identity.namespace
    raise ApiError(403, errors.NOT_AUTHORIZED.format(requested))


def flag(name: str, default: bool = False) -> bool:
    """A boolean query parameter, parsed case-insensitively as OpenWhisk does."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise bad_request(f"The request content was malformed:\nparameter '{name}' must be true or false, got '{raw}'")


def integer(name: str, collection: str, default: int | None = None) -> int | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise bad_request(errors.NOT_INTEGER.format(value=raw, collection=collection)) from None


def paging(collection: str) -> tuple[int, int]:
    """(skip, limit) of a list request, validated against OpenWhisk's bounds."""
    skip = integer("skip", collection, 0) or 0
    limit = integer("limit", collection, LIST_DEFAULT_LIMIT)
    if skip < 0:
        raise bad_request(errors.SKIP_OUT_OF_RANGE.format(value=skip, collection=collection))
    if limit is None or not 0 <= limit <= LIST_MAX_LIMIT:
        raise bad_request(errors.LIMIT_OUT_OF_RANGE.format(value=limit, max=LIST_MAX_LIMIT, collection=collection))
    return skip, limit or LIST_MAX_LIMIT


def listing(collection: str, count: Callable[[], int], page: Callable[[int, int], list[Any]]) -> Response:
    """A list endpoint's answer: ``{collection: n}`` with ``count=true``, else the page ``skip``/``limit`` ask for."""
    if flag("count"):
        return jsonify({collection: count()})
    return jsonify(page(*paging(collection)))


def json_object(optional: bool = True) -> dict[str, Any]:
    """The body as a JSON object (``{}`` when empty and ``optional``); 400 when malformed."""
    raw = request.get_data(cache=True)
    if not raw.strip():
        if optional:
            return {}
        raise bad_request(errors.MALFORMED.format(detail="an empty body is not a JSON object"))
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request(errors.MALFORMED.format(detail=str(exc))) from None
    if not isinstance(body, dict):
        raise bad_request(errors.MALFORMED.format(detail="expected a JSON object"))
    return body


def payload(max_bytes: int) -> dict[str, Any]:
    """An invocation's parameters (the body, ``{}`` when empty); 413 over ``max_bytes``."""
    size = request.content_length or 0
    if size > max_bytes:
        raise ApiError(413, errors.ENTITY_TOO_BIG.format(field="Request", size=size, allowed=max_bytes))
    return json_object()


def model(model_type: type[Model]) -> Model:
    """The body validated as ``model_type``; pydantic's complaint becomes the 400 message."""
    try:
        return model_type.model_validate(json_object(optional=False))
    except ValidationError as exc:
        detail = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise bad_request(errors.MALFORMED.format(detail=detail)) from None
