"""``/api/v1/namespaces/{ns}/activations``: list, get, result and logs."""

from __future__ import annotations

import re

from flask import Blueprint, Response, jsonify, request

from owx.common import jsonvalues
from owx.gateway import errors
from owx.gateway.api.request_args import (LONG_RANGE, flag, gateway, integer, listing, malformed_query, namespace,
                                          paging)
from owx.gateway.errors import bad_request, not_found
from owx.gateway.names import valid_name
from owx.gateway.pipeline.records import split_stored

blueprint = Blueprint("activations", __name__, url_prefix="/api/v1/namespaces/<ns>/activations")
_ACTIVATION_ID = re.compile(r"\A[0-9a-f]{32}\Z")
LISTED_DOCS_MAX_BYTES = 64 * 1024 * 1024  # one docs=true page's records together


def _name_filter() -> str | None:
    """The ``name`` filter: ``action``, or ``pkg/action`` (a package's or binding's name) for the
    activations of an action invoked through that package; an unpackaged name leaves them out."""
    raw = request.args.get("name")
    if not raw:
        return None
    parts = raw.split("/")
    if len(parts) > 2 or not all(valid_name(p) for p in parts):
        raise malformed_query("name", errors.BAD_NAME_FILTER.format(value=raw))
    return raw


def _epoch(name: str) -> int | None:
    """``since``/``upto``: epoch milliseconds as a Java long, as OpenWhisk reads them (before 1970 too)."""
    return integer(name, LONG_RANGE, lambda raw: errors.BAD_EPOCH.format(value=raw))


@blueprint.get("")
@blueprint.get("/")
def list_activations(ns: str):
    """Activations, newest first; filters ``name``, ``since``, ``upto`` (epoch ms); ``docs`` for full records."""
    ns = namespace(ns)
    name = _name_filter()
    since, upto = _epoch("since"), _epoch("upto")
    docs = flag("docs")
    if docs and flag("count"):
        raise bad_request(errors.DOCS_WITH_COUNT)
    store = gateway().activations
    if docs:
        return _full_records(store.list(ns, name, since, upto, *paging("activations")), ns)
    return listing("activations", lambda: store.count(ns, name, since, upto),
                   lambda skip, limit: store.list(ns, name, since, upto, skip, limit))


def _full_records(summaries: list[dict], ns: str) -> Response:
    """``docs=true``: the records of the page's ``summaries``, read and encoded one at a time, within
    ``LISTED_DOCS_MAX_BYTES`` (a 400 past it): 200 records of 10 MB of logs each took gigabytes."""
    store, parts, size = gateway().activations, [], 2
    for item in summaries:
        record = store.get_json(ns, item["activationId"])
        if record is None:
            continue
        parts.append(record)
        size += len(parts[-1]) + 1
        if size > LISTED_DOCS_MAX_BYTES:
            raise bad_request(errors.DOCS_TOO_LARGE.format(mb=LISTED_DOCS_MAX_BYTES // (1024 * 1024)))
    return Response(b"[" + b",".join(parts) + b"]", mimetype="application/json")


def _stored(ns: str, activation_id: str) -> bytes:
    """The record as stored (UTF-8 JSON), 404 if ``ns`` has none of that id."""
    if not _ACTIVATION_ID.match(activation_id):
        raise bad_request(errors.ACTIVATION_ID_ILLEGAL)
    record = gateway().activations.get_json(namespace(ns), activation_id)
    if record is None:
        raise not_found()
    return record


@blueprint.get("/<activation_id>")
def get_activation(ns: str, activation_id: str):
    """One activation record, as stored: records hold up to tens of MB of logs, and parsing and
    encoding one again held the interpreter lock long enough to slow every tenant's requests."""
    return Response(_stored(ns, activation_id), mimetype="application/json")


@blueprint.get("/<activation_id>/result")
def get_result(ns: str, activation_id: str):
    """The ``response`` of an activation (its record parsed without its logs, when they come last)."""
    stored = _stored(ns, activation_id)
    parts = split_stored(stored)
    return jsonify(jsonvalues.loads(stored if parts is None else parts[0])["response"])


@blueprint.get("/<activation_id>/logs")
def get_logs(ns: str, activation_id: str):
    """The log lines of an activation, from the stored record's text when it has them last."""
    stored = _stored(ns, activation_id)
    parts = split_stored(stored)
    if parts is None:  # an older version's record
        return jsonify(logs=jsonvalues.loads(stored)["logs"])
    return Response(b"".join((b'{"logs":', parts[1], b"}")), mimetype="application/json")
