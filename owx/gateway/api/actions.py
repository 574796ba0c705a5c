"""``/api/v1/namespaces/{ns}/actions``: create, read, update, list, delete and invoke."""

from __future__ import annotations

from flask import Blueprint, jsonify, request

from owx.gateway import errors
from owx.gateway.api.request_args import caller, flag, gateway, json_object, model, namespace, paging
from owx.gateway.deferred import Deferred, accepted, defer, json_response
from owx.gateway.entitlement import requested_namespace, require_use
from owx.gateway.errors import ApiError
from owx.gateway.models import ActionBody
from owx.gateway.names import check_name, parse_relative
from owx.gateway.pipeline.invoke import Completion

blueprint = Blueprint("actions", __name__, url_prefix="/api/v1/namespaces/<ns>/actions")
ACTIVATION_HEADER = "x-openwhisk-activation-id"


@blueprint.get("")
@blueprint.get("/")
def list_actions(ns: str):
    """Actions of the namespace, most recently updated first (``count=true``: how many)."""
    return _list(namespace(ns), None)


def _list(ns: str, package: str | None):
    catalog = gateway().catalog
    if flag("count"):
        return jsonify(actions=catalog.count_actions(ns, package))
    skip, limit = paging("actions")
    return jsonify(catalog.list_actions(ns, package, skip, limit))


@blueprint.get("/<path:name>")
def get_action(ns: str, name: str):
    """One action (``code=false`` leaves the code out); ``pkg/`` lists a package's actions."""
    ns = namespace(ns)
    if name.endswith("/"):
        return _list(ns, check_name(name.rstrip("/")))
    return jsonify(gateway().catalog.get_action(parse_relative(ns, name), code=flag("code", True)))


@blueprint.put("/<path:name>")
def put_action(ns: str, name: str):
    """Create an action, or update it with ``overwrite=true`` (absent fields keep their values)."""
    path = parse_relative(namespace(ns), name)
    body = model(ActionBody)
    return jsonify(gateway().catalog.put_action(path, body, overwrite=flag("overwrite")))


@blueprint.delete("/<path:name>")
def delete_action(ns: str, name: str):
    """Delete an action; answers the deleted record."""
    return jsonify(gateway().catalog.delete_action(parse_relative(namespace(ns), name)))


@blueprint.post("/<path:name>")
def invoke(ns: str, name: str):
    """Invoke: 202 ``{activationId}`` unless ``blocking=true``; ``result=true`` answers the result only."""
    service = gateway()
    path = require_use(service.entities, caller(), parse_relative(requested_namespace(caller(), ns), name))
    blocking, result_only = flag("blocking"), flag("result")
    size = request.content_length or 0
    if size > service.settings.gateway.max_payload_bytes:
        raise ApiError(413, errors.ENTITY_TOO_BIG.format(field="Request", size=size,
                                                          allowed=service.settings.gateway.max_payload_bytes))
    params = json_object()
    invocation = service.invoker.start(caller(), service.catalog.resolve(path), params)
    headers = {ACTIVATION_HEADER: invocation.activation_id}
    if not blocking:
        return defer(accepted(invocation), headers)

    def answer(done: Completion):
        return json_response(done.record["response"]["result"] if result_only else done.record, done.status)

    return defer(Deferred(invocation.done, answer, service.settings.gateway.blocking_wait_s, accepted(invocation)),
                 headers)
