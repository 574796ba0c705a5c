"""``/api/v1/namespaces/{ns}/packages``: packages and bindings (other namespaces' published ones too)."""

from __future__ import annotations

from flask import Blueprint, jsonify

from owx.gateway.api.request_args import any_namespace, caller, entity_body, flag, gateway, listing
from owx.gateway.models import PackageBody
from owx.gateway.names import check_name

blueprint = Blueprint("packages", __name__, url_prefix="/api/v1/namespaces/<ns>/packages")


@blueprint.get("")
@blueprint.get("/")
def list_packages(ns: str):
    """Packages and bindings of the namespace; of another namespace its published packages (``count=true``: how many)."""
    ns = any_namespace(ns)
    catalog, me = gateway().catalog, caller().namespace
    return listing("packages", lambda: catalog.count_packages(me, ns),
                   lambda skip, limit: catalog.list_packages(me, ns, skip, limit))


@blueprint.get("/<name>")
def get_package(ns: str, name: str):
    """A package with its actions; a binding with the bound package's actions and merged parameters."""
    ns = any_namespace(ns)
    return jsonify(gateway().catalog.get_package(caller().namespace, ns, check_name(name)))


@blueprint.put("/<name>")
def put_package(ns: str, name: str):
    """Create a package or binding, or update it with ``overwrite=true``."""
    ns = any_namespace(ns)
    body = entity_body(PackageBody)
    return jsonify(gateway().catalog.put_package(caller().namespace, ns, check_name(name), body,
                                                 overwrite=flag("overwrite")))


@blueprint.delete("/<name>")
def delete_package(ns: str, name: str):
    """Delete a binding, or an empty package (``force=true`` deletes its actions too)."""
    ns = any_namespace(ns)
    return jsonify(gateway().catalog.delete_package(caller().namespace, ns, check_name(name), force=flag("force")))
