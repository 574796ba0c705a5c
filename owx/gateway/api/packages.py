"""``/api/v1/namespaces/{ns}/packages``: packages and bindings."""

from __future__ import annotations

from flask import Blueprint, jsonify

from owx.gateway.api.request_args import flag, gateway, model, namespace, paging
from owx.gateway.models import PackageBody
from owx.gateway.names import check_name

blueprint = Blueprint("packages", __name__, url_prefix="/api/v1/namespaces/<ns>/packages")


@blueprint.get("")
@blueprint.get("/")
def list_packages(ns: str):
    """Packages of the namespace (``count=true``: how many)."""
    ns = namespace(ns)
    catalog = gateway().catalog
    if flag("count"):
        return jsonify(packages=catalog.count_packages(ns))
    skip, limit = paging("packages")
    return jsonify(catalog.list_packages(ns, skip, limit))


@blueprint.get("/<name>")
def get_package(ns: str, name: str):
    """A package with the summaries of its actions."""
    return jsonify(gateway().catalog.get_package(namespace(ns), check_name(name)))


@blueprint.put("/<name>")
def put_package(ns: str, name: str):
    """Create a package or binding, or update it with ``overwrite=true``."""
    body = model(PackageBody)
    return jsonify(gateway().catalog.put_package(namespace(ns), check_name(name), body, overwrite=flag("overwrite")))


@blueprint.delete("/<name>")
def delete_package(ns: str, name: str):
    """Delete an empty package (``force=true`` deletes its actions too)."""
    return jsonify(gateway().catalog.delete_package(namespace(ns), check_name(name), force=flag("force")))
