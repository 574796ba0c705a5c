"""``/api/v1/namespaces/{ns}/triggers``: create, read, update, list, delete and fire."""

from __future__ import annotations

from flask import Blueprint, g, jsonify, request

from owx.gateway.api.invoke import ACTIVATION_HEADER
from owx.gateway.api.request_args import caller, entity_body, flag, gateway, json_object, listing, namespace
from owx.gateway.names import check_name
from owx.gateway.reactive.models import TriggerBody

blueprint = Blueprint("triggers", __name__, url_prefix="/api/v1/namespaces/<ns>/triggers")


@blueprint.get("")
@blueprint.get("/")
def list_triggers(ns: str):
    """Triggers of the namespace, most recently updated first (``count=true``: how many)."""
    ns = namespace(ns)
    triggers = gateway().reactive.triggers
    return listing("triggers", lambda: triggers.count(ns), lambda skip, limit: triggers.list(ns, skip, limit))


@blueprint.get("/<name>")
def get_trigger(ns: str, name: str):
    """One trigger, with the rules linked to it."""
    return jsonify(gateway().reactive.triggers.get(namespace(ns), check_name(name)))


@blueprint.put("/<name>")
def put_trigger(ns: str, name: str):
    """Create a trigger, or update it with ``overwrite=true`` (absent fields keep their values)."""
    ns, name = namespace(ns), check_name(name)
    body = entity_body(TriggerBody)
    return jsonify(gateway().reactive.triggers.put(ns, name, body, overwrite=flag("overwrite")))


@blueprint.delete("/<name>")
def delete_trigger(ns: str, name: str):
    """Delete a trigger (its feed stops); answers the deleted trigger."""
    return jsonify(gateway().reactive.delete_trigger(namespace(ns), check_name(name)))


@blueprint.post("/<name>")
def fire(ns: str, name: str):
    """Fire: 202 ``{activationId}`` of the trigger's record, or 204 when no rule of it is active."""
    ns, name = namespace(ns), check_name(name)
    service = gateway()
    params = json_object(max_bytes=service.settings.gateway.max_payload_bytes)
    activation_id = service.reactive.firer.fire(caller(), name, params, dict(request.headers),
                                                g.get("transaction_id"))
    if activation_id is None:
        return "", 204
    return jsonify(activationId=activation_id), 202, {ACTIVATION_HEADER: activation_id}
