"""Web actions: ``/api/v1/web/{ns}/{pkg|default}/{action}[.json|.html|.http|.text][/path]``.

No authentication: the action must carry the ``web-export`` annotation.  The HTTP
request becomes parameters (``__ow_method``, ``__ow_headers``, ``__ow_path``, query
and body merged, or ``__ow_query``/``__ow_body`` for ``raw-http`` actions) and the
result becomes the HTTP response.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from flask import Blueprint, Response, request

from owx.gateway import errors
from owx.gateway.api.actions import ACTIVATION_HEADER
from owx.gateway.api.request_args import gateway
from owx.gateway.catalog import annotation
from owx.gateway.deferred import Deferred, accepted, defer, json_response
from owx.gateway.errors import ApiError, bad_request, not_found
from owx.gateway.names import DEFAULT_PACKAGE, EntityPath, check_name, check_namespace
from owx.gateway.pipeline.invoke import Completion
from owx.platform.types import APPLICATION_ERROR, SUCCESS

blueprint = Blueprint("web", __name__, url_prefix="/api/v1/web")
EXTENSIONS = (".json", ".html", ".http", ".text")
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
PROPERTY_MISSING = "Response does not include requested property."


def _split(rest: str) -> tuple[str, str, str]:
    """``action.ext/extra/path`` -> (action, extension, extra path)."""
    head, _, extra = rest.partition("/")
    for extension in EXTENSIONS:
        if head.endswith(extension):
            return head[: -len(extension)], extension, f"/{extra}" if extra else ""
    return head, ".http", f"/{extra}" if extra else ""


def _parameters(raw_http: bool, extra_path: str) -> dict[str, Any]:
    body = request.get_data(cache=True)
    params: dict[str, Any] = {
        "__ow_method": request.method.lower(),
        "__ow_headers": {k.lower(): v for k, v in request.headers.items()},
        "__ow_path": extra_path,
    }
    if raw_http:
        params["__ow_query"] = request.query_string.decode()
        params["__ow_body"] = _body_text(body)
        return params
    params.update(request.args.to_dict())
    if request.mimetype == "application/json" and body.strip():
        try:
            parsed = json.loads(body)
        except ValueError as exc:
            raise bad_request(errors.MALFORMED.format(detail=str(exc))) from None
        if isinstance(parsed, dict):
            params.update(parsed)
        else:
            params["__ow_body"] = parsed
    elif request.mimetype == "application/x-www-form-urlencoded":
        params.update(request.form.to_dict())
    elif body:
        params["__ow_body"] = _body_text(body)
    return params


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
        resolved = service.catalog.resolve(path) if owner else None
    except ApiError:
        resolved = None
    if resolved is None or not annotation(resolved.doc, "web-export"):
        raise not_found()
    if service.settings.gateway.max_payload_bytes < (request.content_length or 0):
        raise ApiError(413, errors.ENTITY_TOO_BIG.format(field="Request", size=request.content_length,
                                                          allowed=service.settings.gateway.max_payload_bytes))
    invocation = service.invoker.start(owner, resolved, _parameters(bool(annotation(resolved.doc, "raw-http")),
                                                                    extra_path))
    headers = {ACTIVATION_HEADER: invocation.activation_id}

    def answer(done: Completion) -> Response:
        status, result = done.record["response"]["status"], done.record["response"]["result"]
        if status != SUCCESS:
            code = 400 if status == APPLICATION_ERROR else 502
            message = result.get("error") if isinstance(result, dict) else None
            raise ApiError(code, message if isinstance(message, str) else json.dumps(message))
        return _respond(extension, result)

    return defer(Deferred(invocation.done, answer, service.settings.gateway.blocking_wait_s, accepted(invocation)),
                 headers)


def _respond(extension: str, result: Any) -> Response:
    if extension == ".json":
        return json_response(result)
    if extension == ".http":
        return _http(result)
    if not isinstance(result, dict) or "body" not in result:
        raise bad_request(PROPERTY_MISSING)
    mimetype = "text/html" if extension == ".html" else "text/plain"
    return Response(str(result["body"]), mimetype=mimetype)


def _http(result: Any) -> Response:
    """``{statusCode, headers, body}`` -> response; a base64 body of a binary type is decoded."""
    if not isinstance(result, dict):
        raise bad_request(PROPERTY_MISSING)
    headers = {str(k): str(v) for k, v in (result.get("headers") or {}).items()}
    body = result.get("body")
    status = int(result.get("statusCode") or (200 if body is not None else 204))
    content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), None)
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
