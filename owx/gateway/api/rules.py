"""``/api/v1/namespaces/{ns}/rules``: create, read, update, enable/disable, list and delete."""

from __future__ import annotations

from flask import Blueprint, jsonify

from owx.gateway.api.request_args import caller, entity_body, flag, gateway, listing, namespace
from owx.gateway.names import check_name
from owx.gateway.reactive.models import RuleBody, StatusBody

blueprint = Blueprint("rules", __name__, url_prefix="/api/v1/namespaces/<ns>/rules")


@blueprint.get("")
@blueprint.get("/")
def list_rules(ns: str):
    """Rules of the namespace, most recently updated first (``count=true``: how many)."""
    ns = namespace(ns)
    rules = gateway().reactive.rules
    return listing("rules", lambda: rules.count(ns), lambda skip, limit: rules.list(ns, skip, limit))


@blueprint.get("/<name>")
def get_rule(ns: str, name: str):
    """One rule with its status (``active``, or ``inactive`` when disabled or its trigger is gone)."""
    return jsonify(gateway().reactive.rules.get(namespace(ns), check_name(name)))


@blueprint.put("/<name>")
def put_rule(ns: str, name: str):
    """Create a rule (active) linking a trigger to an action, or update it with ``overwrite=true``."""
    namespace(ns)
    body = entity_body(RuleBody)
    return jsonify(gateway().reactive.rules.put(caller(), check_name(name), body, overwrite=flag("overwrite")))


@blueprint.post("/<name>")
def set_status(ns: str, name: str):
    """Enable (``{"status": "active"}``) or disable (``"inactive"``) a rule."""
    ns, name = namespace(ns), check_name(name)
    body = entity_body(StatusBody)
    gateway().reactive.rules.set_status(ns, name, body.status)
    return jsonify({})


@blueprint.delete("/<name>")
def delete_rule(ns: str, name: str):
    """Delete a rule (whatever its status); answers the deleted rule."""
    return jsonify(gateway().reactive.rules.delete(namespace(ns), check_name(name)))
