"""Web actions: ``/api/v1/web/{ns}/{pkg|default}/{action}[.json|.html|.http|.text|.svg][/path]``.

No authentication needed: the action must carry the ``web-export`` annotation. As OpenWhisk's:

- ``require-whisk-auth``: a string or number must come in the ``X-Require-Whisk-Auth`` header;
  ``true`` asks for any valid OpenWhisk key (``Authorization: Basic``); anything else but
  ``false`` lets nobody in (401);
- the HTTP request becomes parameters (``__ow_method``, ``__ow_headers``, ``__ow_path``, and
  ``__ow_user``, the caller's namespace, when a valid key came: unlike OpenWhisk, that key is
  then left out of ``__ow_headers``, as the action may be another tenant's; query and body merged, or
  ``__ow_query``/``__ow_body`` for ``raw-http`` actions), which may not name those reserved
  properties nor the action's final parameters (400); the result becomes the HTTP response;
- unless ``web-custom-options`` is true, owx answers ``OPTIONS`` itself (the action does not run)
  and every answer carries CORS headers that allow any origin; with it, the action answers
  ``OPTIONS`` (whatever ``require-whisk-auth`` says) and sets its own.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from hmac import compare_digest
from typing import Any

from flask import Blueprint, Response, g, request

from owx.gateway import cors, errors
from owx.gateway.api.invoke import ACTIVATION_HEADER
from owx.gateway.api.request_args import body_bytes, gateway, json_value
from owx.gateway.catalog import WEB_SECRET, annotation
from owx.gateway.deferred import Deferred, accepted, defer, json_response
from owx.gateway.errors import UNAUTHENTICATED, ApiError, bad_request, not_found
from owx.gateway.identity import Identity
from owx.gateway.names import DEFAULT_PACKAGE, EntityPath, check_name, check_namespace
from owx.gateway.pipeline.invoke import PARAMETERS_NOT_ALLOWED, Completion
from owx.platform.types import APPLICATION_ERROR, SUCCESS

blueprint = Blueprint("web", __name__, url_prefix="/api/v1/web")
EXTENSIONS = (".json", ".html", ".http", ".text", ".svg")
MEDIA = {".html": "text/html", ".text": "text/plain", ".svg": "image/svg+xml"}  # of a result's "body" string
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
PROPERTY_MISSING = "Response does not include requested property."
RESERVED = frozenset({"__ow_method", "__ow_headers", "__ow_path", "__ow_user", "__ow_query", "__ow_body"})
SECRET_HEADER = "X-Require-Whisk-Auth"
_STATUS_TEXT = re.compile(r"\s*[+-]?[0-9]{1,9}\s*", re.ASCII)  # what int() reads, of a sane length
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", re.ASCII)  # an RFC 9110 token
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")  # one line of visible text (latin-1)


def _split(rest: str) -> tuple[str, str, str]:
    """``action.ext/extra/path`` -> (action, extension, extra path)."""
    head, _, extra = rest.partition("/")
    for extension in EXTENSIONS:
        if head.endswith(extension):
            return head[: -len(extension)], extension, f"/{extra}" if extra else ""
    return head, ".http", f"/{extra}" if extra else ""


def _parameters(raw_http: bool, extra_path: str, max_bytes: int, caller: Identity | None,
                cors_headers: dict[str, str]) -> dict[str, Any]:
    body = body_bytes(max_bytes)
    headers = {k.lower(): v for k, v in request.headers.items()}
    params: dict[str, Any] = {"__ow_method": request.method.lower(), "__ow_headers": headers, "__ow_path": extra_path}
    if caller is not None:
        params["__ow_user"] = caller.namespace
    if caller is not None or ("authorization" in headers and gateway().auth.names_a_key(headers["authorization"])):
        del headers["authorization"]  # a caller's owx key is never shown to another tenant's action, mangled or not
    if raw_http:
        params["__ow_query"] = request.query_string.decode()
        params["__ow_body"] = _body_text(body)
        return params
    given: dict[str, Any] = request.args.to_dict()
    if request.mimetype == "application/json" and body.strip():
        parsed = json_value(body)
        if isinstance(parsed, dict):
            given.update(parsed)
        else:
            params["__ow_body"] = parsed
    elif request.mimetype == "application/x-www-form-urlencoded":
        given.update(request.form.to_dict())
    elif body:
        params["__ow_body"] = _body_text(body)
    if RESERVED.intersection(given):  # the request context is owx's to tell, never the caller's
        raise ApiError(400, PARAMETERS_NOT_ALLOWED, cors_headers)
    return {**params, **given}


def _body_text(body: bytes) -> str:
    try:
        return body.decode()
    except UnicodeDecodeError:
        return base64.b64encode(body).decode()


@blueprint.route("/<ns>/<package>/<path:rest>", methods=METHODS)
def web_action(ns: str, package: str, rest: str):
    """Run a web action and map its result to an HTTP response."""
    service = gateway()
    name, extension, extra_path = _split(rest)
    check_namespace(ns)
    path = EntityPath(ns, check_name(name), None if package == DEFAULT_PACKAGE else check_name(package))
    owner = service.auth.owner(ns)
    try:
        resolved = service.catalog.resolve(path, ns) if owner else None
    except ApiError:
        resolved = None
    if resolved is None or not annotation(resolved.doc, "web-export"):
        raise not_found()
    custom_options = annotation(resolved.doc, "web-custom-options") is True
    cors_headers = {} if custom_options else _cors()
    if request.method == "OPTIONS" and not custom_options:
        return Response(status=200, headers=cors_headers)
    caller = _caller()
    if not (request.method == "OPTIONS" or _allowed(annotation(resolved.doc, WEB_SECRET), caller)):
        raise ApiError(401, UNAUTHENTICATED, cors_headers)
    throttle = service.invoker.throttle  # anyone may call a web action: its owner's rate bounds the bodies parsed
    throttle.check_rate(owner.namespace)
    try:
        params = _parameters(bool(annotation(resolved.doc, "raw-http")), extra_path,
                             service.settings.gateway.max_payload_bytes, caller, cors_headers)
    except ApiError:
        throttle.count_refused(owner.namespace)
        raise
    served_as = owner if caller is not None and caller.namespace == owner.namespace \
        else dataclasses.replace(owner, outsider=True)  # its record is trimmed first (`stores.retention`)
    invocation = service.invoker.start(served_as, resolved, params, g.get("transaction_id"))
    headers = {ACTIVATION_HEADER: invocation.activation_id, **cors_headers}

    def answer(done: Completion) -> Response:
        status, result = done.record["response"]["status"], done.record["response"]["result"]
        if status != SUCCESS:
            code = 400 if status == APPLICATION_ERROR else 502
            message = result.get("error") if isinstance(result, dict) else None
            raise ApiError(code, message if isinstance(message, str) else json.dumps(message))
        return _respond(extension, result)

    return defer(Deferred(invocation.done, answer, service.settings.gateway.blocking_wait_s,
                          accepted(invocation.activation_id)), headers)


def _cors() -> dict[str, str]:
    """The CORS headers of a web action that leaves CORS to owx (the allowed headers are the ones a
    preflight asks for, if it does)."""
    asked = request.headers.get("Access-Control-Request-Headers")
    return {**cors.WEB_ACTIONS, "Access-Control-Allow-Headers": asked} if asked else cors.WEB_ACTIONS


def _caller() -> Identity | None:
    """Whoever a valid ``Authorization`` names; None without one, or with a wrong one (anonymous then,
    as OpenWhisk's)."""
    authorization = request.headers.get("Authorization")
    if authorization is None:
        return None
    try:
        return gateway().auth.identify(authorization)
    except ApiError:
        return None


def _allowed(required: Any, caller: Identity | None) -> bool:
    """Whether the request may run an action annotated ``require-whisk-auth: required`` (None: absent)."""
    if required is None or required is False:
        return True
    if required is True:
        return caller is not None
    if isinstance(required, (str, int, float)):
        secret = request.headers.get(SECRET_HEADER)
        return secret is not None and compare_digest(secret.encode(), str(required).encode())
    return False


def _respond(extension: str, result: Any) -> Response:
    if extension == ".json":
        return json_response(result)
    if extension == ".http":
        return _http(result)
    if not isinstance(result, dict) or "body" not in result:
        raise bad_request(PROPERTY_MISSING)
    if not isinstance(result["body"], str):
        raise bad_request(f"Response is not valid '{MEDIA[extension]}'.")
    return Response(result["body"], mimetype=MEDIA[extension])


def _http(result: Any) -> Response:
    """``{statusCode, headers, body}`` -> response; a base64 body of a binary type is decoded. A result
    that is not such an object (bad status code, header or type) is a 400, as in OpenWhisk."""
    if not isinstance(result, dict):
        raise bad_request(errors.INVALID_HTTP_RESPONSE)
    headers = _headers(result.get("headers", {}))
    body = result.get("body")
    status = _status(result.get("statusCode"), 200 if body not in (None, "") else 204)
    content_type = next((v for k, v in headers if k.lower() == "content-type"), None)
    if isinstance(body, (dict, list)):
        return Response(json.dumps(body), status=status, headers=headers, mimetype=content_type or "application/json")
    if body is None:
        return Response(status=status, headers=headers)
    text = str(body)
    if content_type and not content_type.startswith(("text/", "application/json")):
        try:
            return Response(base64.b64decode(text, validate=True), status=status, headers=headers)
        except ValueError:
            pass
    return Response(text, status=status, headers=headers, mimetype=None if content_type else "text/html")


def _status(value: Any, default: int) -> int:
    """A whole-number status code (or its decimal string) of a final answer (not 1xx)."""
    if value is None:
        return default
    if isinstance(value, str) and _STATUS_TEXT.fullmatch(value):
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 200 <= value <= 599:
        raise bad_request(errors.INVALID_HTTP_RESPONSE)
    return value


def _headers(value: Any) -> list[tuple[str, str]]:
    """``{name: value | [values]}`` -> header pairs; names must be tokens and values single lines."""
    if not isinstance(value, dict):
        raise bad_request(errors.INVALID_HTTP_RESPONSE)
    pairs = []
    for name, item in value.items():
        for single in item if isinstance(item, list) else [item]:
            if isinstance(single, (dict, list)) or single is None or not _HEADER_NAME.fullmatch(name):
                raise bad_request(errors.INVALID_HTTP_RESPONSE)
            text = json.dumps(single) if isinstance(single, bool) else str(single)
            if not _HEADER_VALUE.fullmatch(text):
                raise bad_request(errors.INVALID_HTTP_RESPONSE)
            pairs.append((name, text))
    return pairs
