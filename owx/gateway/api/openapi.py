"""``/api/v1/api-docs``: the OpenAPI document of the routes this server serves.

Built from the registered routes (their docstrings are the summaries) and the
pydantic request models, so it cannot drift from the code.
"""

from __future__ import annotations

import re
from typing import Any

from flask import Blueprint, current_app, jsonify

from owx.gateway.models import ActionBody, PackageBody

blueprint = Blueprint("openapi", __name__)
_PARAM = re.compile(r"<(?:[a-z]+:)?([a-z_]+)>")
_BODIES = {("actions.put_action", "put"): ActionBody, ("packages.put_package", "put"): PackageBody}
_ERROR = {"type": "object", "properties": {"error": {"type": "string"}, "code": {"type": "string"}}}


def document() -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for rule in current_app.url_map.iter_rules():
        if rule.endpoint == "static" or not rule.rule.startswith(("/api/v1", "/")):
            continue
        route = _PARAM.sub(r"{\1}", rule.rule)
        view = current_app.view_functions[rule.endpoint]
        summary = (view.__doc__ or rule.endpoint).strip().splitlines()[0]
        params = [{"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
                  for n in _PARAM.findall(rule.rule)]
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            operation: dict[str, Any] = {
                "operationId": f"{rule.endpoint}.{method.lower()}",
                "summary": summary,
                "parameters": params,
                "responses": {"200": {"description": "OK"},
                              "default": {"description": "error", "content": {"application/json": {"schema": _ERROR}}}},
            }
            body = _BODIES.get((rule.endpoint, method.lower()))
            if body:
                operation["requestBody"] = {"content": {"application/json": {"schema": body.model_json_schema()}}}
            paths.setdefault(route, {})[method.lower()] = operation
    return {
        "openapi": "3.0.3",
        "info": {"title": "owx (OpenWhisk REST API)", "version": "1.0.0"},
        "components": {"securitySchemes": {"basic": {"type": "http", "scheme": "basic"}}},
        "security": [{"basic": []}],
        "paths": dict(sorted(paths.items())),
    }


@blueprint.get("/api/v1/api-docs")
def api_docs():
    """The OpenAPI document of this API."""
    return jsonify(document())
