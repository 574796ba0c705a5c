"""``/api/v1/namespaces/{ns}/actions``: create, read, update, list, delete and invoke."""

from __future__ import annotations

import re
from typing import Any

from flask import Blueprint, jsonify

from owx.gateway.api.request_args import any_namespace, caller, flag, gateway, json_object, model, paging
from owx.gateway.deferred import Deferred, accepted, defer, json_response
from owx.gateway.models import ActionBody
from owx.gateway.names import check_name, parse_relative
from owx.gateway.pipeline.invoke import Completion

blueprint = Blueprint("actions", __name__, url_prefix="/api/v1/namespaces/<ns>/actions")
ACTIVATION_HEADER = "x-openwhisk-activation-id"
INLINE_MAX_BODY_BYTES = 16 * 1024  # parsing more on the event loop would hold up other requests' I/O
_INVOKE_PATH = re.compile(r"/api/v1/namespaces/[^/]+/actions/.+")


@blueprint.get("")
@blueprint.get("/")
def list_actions(ns: str):
    """Actions of the namespace, packaged ones too, most recently updated first (``count=true``: how many)."""
    return _list(any_namespace(ns), None)


def _list(ns: str, package: str | None):
    catalog, me = gateway().catalog, caller().namespace
    if flag("count"):
        return jsonify(actions=catalog.count_actions(me, ns, package))
    skip, limit = paging("actions")
    return jsonify(catalog.list_actions(me, ns, package, skip, limit))


@blueprint.get("/<path:name>")
def get_action(ns: str, name: str):
    """One action (``code=false`` leaves the code out); ``pkg/`` lists a package's or binding's actions."""
    ns = any_namespace(ns)
    if name.endswith("/"):
        return _list(ns, check_name(name[:-1]))
    path = parse_relative(ns, name)
    return jsonify(gateway().catalog.get_action(caller().namespace, path, code=flag("code", True)))


@blueprint.put("/<path:name>")
def put_action(ns: str, name: str):
    """Create an action, or update it with ``overwrite=true`` (absent fields keep their values)."""
    path = parse_relative(any_namespace(ns), name)
    body = model(ActionBody)
    return jsonify(gateway().catalog.put_action(caller().namespace, path, body, overwrite=flag("overwrite")))


@blueprint.delete("/<path:name>")
def delete_action(ns: str, name: str):
    """Delete an action; answers the deleted record."""
    return jsonify(gateway().catalog.delete_action(caller().namespace, parse_relative(any_namespace(ns), name)))


def runs_inline(scope: dict[str, Any], body: bytes) -> bool:
    """Whether the server tries this request on its event loop first (:mod:`owx.gateway.inline`):
    an invoke with a small body."""
    return (scope["method"] == "POST" and len(body) <= INLINE_MAX_BODY_BYTES
            and _INVOKE_PATH.fullmatch(scope["path"]) is not None)


@blueprint.post("/<path:name>")
def invoke(ns: str, name: str):
    """Invoke: 202 ``{activationId}`` unless ``blocking=true``; ``result=true`` answers the result only."""
    service, identity = gateway(), caller()
    path = parse_relative(any_namespace(ns), name)
    blocking, result_only = flag("blocking"), flag("result")
    params = json_object(max_bytes=service.settings.gateway.max_payload_bytes)
    invocation = service.invoker.start(identity, service.catalog.resolve(path, identity.namespace), params)
    headers = {ACTIVATION_HEADER: invocation.activation_id}
    if not blocking:
        return defer(accepted(invocation), headers)

    def answer(done: Completion):
        return json_response(done.record["response"]["result"] if result_only else done.record, done.status)

    return defer(Deferred(invocation.done, answer, service.settings.gateway.blocking_wait_s, accepted(invocation)),
                 headers)
