"""``/api/v1/api-docs``: the OpenAPI 3.1 document of the routes this server serves.

Built from the registered routes (their docstrings are the summaries) and the invoke route the
event loop serves (:mod:`owx.gateway.api.invoke`), the query parameters each route reads (`QUERY`)
and the pydantic request models, so it follows the code. The tests validate
it with openapi-spec-validator and drive the server from it with schemathesis.
"""

from __future__ import annotations

import re
from typing import Any

from flask import Blueprint, Response, current_app, jsonify
from pydantic import BaseModel

from owx.gateway.api import invoke
from owx.gateway.api.request_args import INT_RANGE, LIST_MAX_LIMIT, LONG_RANGE, gateway
from owx.gateway.models import ActionBody, PackageBody
from owx.gateway.names import NAME_PATTERN

blueprint = Blueprint("openapi", __name__)
_PARAM = re.compile(r"<(?:([a-z]+):)?([a-z_]+)>")
_REF = "#/components/schemas/{model}"
_FLAG = {"type": "boolean"}
_EPOCH_MS = {"type": "integer", "minimum": 0, "maximum": LONG_RANGE[1]}
_PAGING = {"limit": {"type": "integer", "minimum": 0, "maximum": LIST_MAX_LIMIT},
           "skip": {"type": "integer", "minimum": 0, "maximum": INT_RANGE[1]}, "count": _FLAG}
INVOKE = "actions.invoke"
_CACHE = "owx.openapi"  # the encoded document, in the app's extensions
INVOKE_SUMMARY = ("Invoke an action: its activation id (202); with blocking=true its record, or its result "
                  "with result=true")
#: The query parameters each endpoint reads, with their schemas.
QUERY: dict[str, dict[str, dict[str, Any]]] = {
    "actions.list_actions": _PAGING,
    "actions.get_action": {"code": _FLAG, **_PAGING},
    "actions.put_action": {"overwrite": _FLAG},
    INVOKE: {"blocking": _FLAG, "result": _FLAG},  # and ``timeout``, bounded by the configured wait
    "packages.list_packages": _PAGING,
    "packages.put_package": {"overwrite": _FLAG},
    "packages.delete_package": {"force": _FLAG},
    "activations.list_activations": {"name": {"type": "string"}, "since": _EPOCH_MS, "upto": _EPOCH_MS,
                                     "docs": _FLAG, **_PAGING},
}
#: Request bodies: a pydantic model, or any JSON object (an invocation's parameters).
BODIES: dict[tuple[str, str], type[BaseModel] | None] = {
    ("actions.put_action", "put"): ActionBody,
    ("packages.put_package", "put"): PackageBody,
    (INVOKE, "post"): None,
}
UNAUTHENTICATED = ("info.root", "info.api_info", "openapi.api_docs", "web.web_action")
_ERROR = {
    "type": "object",
    "required": ["error", "code"],
    "properties": {"error": {"type": "string"}, "code": {"type": "string"}},
}


def document() -> dict[str, Any]:
    """The OpenAPI document of every route registered on the current app."""
    schemas: dict[str, Any] = {"Error": _ERROR}
    paths: dict[str, dict[str, Any]] = {}
    rules = [rule for rule in current_app.url_map.iter_rules() if rule.endpoint != "static"]
    canonical = {(rule.endpoint, rule.rule) for rule in rules}
    for rule in rules:
        if rule.rule.endswith("/") and (rule.endpoint, rule.rule[:-1]) in canonical:
            continue  # ``.../actions/`` is ``.../actions``: documented once
        route = _PARAM.sub(r"{\2}", rule.rule)
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            paths.setdefault(route, {})[method.lower()] = _operation(rule.endpoint, method.lower(), rule.rule, schemas)
    paths.setdefault(_PARAM.sub(r"{\2}", invoke.ROUTE), {})["post"] = _operation(INVOKE, "post", invoke.ROUTE, schemas)
    return {
        "openapi": "3.1.0",
        "info": {"title": "owx (OpenWhisk REST API)", "version": "1.0.0"},
        "components": {"securitySchemes": {"basic": {"type": "http", "scheme": "basic"}}, "schemas": schemas},
        "security": [{"basic": []}],
        "paths": dict(sorted(paths.items())),
    }


def _operation(endpoint: str, method: str, rule: str, schemas: dict[str, Any]) -> dict[str, Any]:
    view = current_app.view_functions.get(endpoint)
    summary = INVOKE_SUMMARY if view is None else (view.__doc__ or endpoint).strip().splitlines()[0]
    parameters = [{"name": name, "in": "path", "required": True, "schema": _path_schema(converter, name)}
                  for converter, name in _PARAM.findall(rule)]
    parameters += [{"name": name, "in": "query", "required": False, "schema": schema}
                   for name, schema in QUERY.get(endpoint, {}).items()]
    error = {"description": "OpenWhisk's error body", "content": {"application/json": {"schema": {"$ref": _REF.format(
        model="Error")}}}}
    operation: dict[str, Any] = {
        "operationId": f"{endpoint}.{method}",
        "summary": summary,
        "parameters": parameters,
        "responses": {"200": {"description": "OK"}, "default": error},
    }
    if endpoint == INVOKE:
        wait_ms = int(gateway().settings.gateway.blocking_wait_s * 1000)
        parameters.append({"name": "timeout", "in": "query", "required": False,
                           "schema": {"type": "integer", "minimum": 1, "maximum": wait_ms}})
        operation["responses"]["202"] = {"description": "accepted: the activation id"}
        operation["responses"]["502"] = {"description": "blocking: the action failed (an application or developer "
                                         "error): its record, or with result=true its result",
                                         "content": {"application/json": {"schema": {"type": ["object", "array"]}}}}
    if endpoint in UNAUTHENTICATED:
        operation["security"] = []
    if (endpoint, method) in BODIES:
        model = BODIES[(endpoint, method)]
        schema = _model_schema(model, schemas) if model else {"type": "object"}
        operation["requestBody"] = {"required": model is not None,
                                    "content": {"application/json": {"schema": schema}}}
    return operation


def _path_schema(converter: str, name: str) -> dict[str, Any]:
    """Names as OpenWhisk's grammar has them (``path:name`` is ``[package/]name``); others any text."""
    if name == "ns":
        return {"type": "string", "pattern": f"^{NAME_PATTERN}$", "examples": ["_"]}
    if name == "name":
        package = f"(?:/{NAME_PATTERN})?" if converter == "path" else ""
        return {"type": "string", "pattern": f"^{NAME_PATTERN}{package}$"}
    if name == "activation_id":
        return {"type": "string", "pattern": "^[0-9a-f]{32}$"}
    return {"type": "string", "minLength": 1}


def _model_schema(model: type[BaseModel], schemas: dict[str, Any]) -> dict[str, Any]:
    """A reference to ``model``, its schema and the ones it uses put under ``components/schemas``."""
    schema = model.model_json_schema(ref_template=_REF)
    schemas.update(schema.pop("$defs", {}))
    schemas[model.__name__] = schema
    return {"$ref": _REF.format(model=model.__name__)}


@blueprint.get("/api/v1/api-docs")
def api_docs():
    """The OpenAPI document of this API."""
    cached = current_app.extensions.get(_CACHE)
    if cached is None:  # the routes are all registered before the first request: made once per app
        cached = current_app.extensions[_CACHE] = jsonify(document()).get_data()
    return Response(cached, mimetype="application/json")
