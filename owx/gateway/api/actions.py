"""``/api/v1/namespaces/{ns}/actions``: create, read, update, list and delete (invoke is
:mod:`owx.gateway.api.invoke`, served on the event loop)."""

from __future__ import annotations

from flask import Blueprint, jsonify

from owx.gateway.api.request_args import any_namespace, caller, entity_body, flag, gateway, listing
from owx.gateway.models import ActionBody
from owx.gateway.names import check_name, parse_relative

blueprint = Blueprint("actions", __name__, url_prefix="/api/v1/namespaces/<ns>/actions")


@blueprint.get("")
@blueprint.get("/")
def list_actions(ns: str):
    """Actions of the namespace, packaged ones too, most recently updated first (``count=true``: how many)."""
    return _list(any_namespace(ns), None)


def _list(ns: str, package: str | None):
    catalog, me = gateway().catalog, caller().namespace
    return listing("actions", lambda: catalog.count_actions(me, ns, package),
                   lambda skip, limit: catalog.list_actions(me, ns, package, skip, limit))


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
    body = entity_body(ActionBody)
    return jsonify(gateway().catalog.put_action(caller().namespace, path, body, overwrite=flag("overwrite")))


@blueprint.delete("/<path:name>")
def delete_action(ns: str, name: str):
    """Delete an action; answers the deleted record."""
    return jsonify(gateway().catalog.delete_action(caller().namespace, parse_relative(any_namespace(ns), name)))
