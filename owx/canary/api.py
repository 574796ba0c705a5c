"""Canary's routes under a namespace, and the check of ``canary`` annotations at action create.

``GET  /api/v1/namespaces/{ns}/canary``                   tables, row counts and counters
``GET  /api/v1/namespaces/{ns}/canary/{table}``           rows, newest first (``limit``, ``skip``)
``GET  /api/v1/namespaces/{ns}/canary/{table}/{id}``      one row
``POST /api/v1/namespaces/{ns}/canary/jobs``              submit a job: ``{"action": "name",
                                                          "params": [{...}, ...]}`` -> 202
                                                          ``{"jobId", "activationIds"}``

A job is one activation of the action per parameter set, admitted all together when
memory and the namespace's concurrency allow (gang admission); each activation's record
arrives under its id as usual.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Flask, jsonify
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from owx.canary.core import CanaryCore
from owx.canary.options import ANNOTATION, BadAnnotation, options_of, parse_options
from owx.canary.tables import PLATFORM_NS, TABLES
from owx.gateway.api.request_args import caller, gateway, model, namespace, paging
from owx.common import jsonvalues
from owx.gateway.errors import ApiError, bad_request, not_found, too_big
from owx.gateway.ids import new_id
from owx.gateway.names import parse_relative

blueprint = Blueprint("canary", __name__, url_prefix="/api/v1/namespaces/<ns>/canary")
MAX_JOB_FUNCTIONS = 1000
NOT_STATEFUL = "Action '{action}' is not stateful: give it a 'canary' annotation to submit jobs of it."
NEVER_FITS = "A job of {count} functions of {memory} MB can never fit the platform's memory."
COPIES_NEVER_FIT = "{copies} copies of {memory} MB (request-replication) can never run at once in the platform's memory."
SEQUENCE_STATEFUL = "A sequence cannot be stateful: annotate its component actions with 'canary' instead."


class JobBody(BaseModel):
    """Body of ``POST .../canary/jobs``."""

    model_config = ConfigDict(extra="forbid")
    action: StrictStr = Field(min_length=1)
    params: list[dict[str, Any]] = Field(min_length=1, max_length=MAX_JOB_FUNCTIONS)


def core() -> CanaryCore:
    from owx.canary.extension import CanaryExtension  # the extension imports this module

    extension = gateway().extensions["canary"]
    assert isinstance(extension, CanaryExtension) and extension.core is not None
    return extension.core


def _table(name: str) -> str:
    if name not in TABLES:
        raise not_found(f"Unknown canary table '{name}'; tables: {', '.join(TABLES)}.")
    return name


def _scope(ns: str, table: str) -> str:
    own = namespace(ns)
    return PLATFORM_NS if table == "worker_info" else own


@blueprint.get("")
@blueprint.get("/")
def overview(ns: str):
    """The tables with their row counts, and the namespace's counters."""
    tables = core().tables
    counts = {table: tables.count(_scope(ns, table), table) for table in TABLES}
    return jsonify(tables=counts, stats=core().stats_of(namespace(ns)))


@blueprint.get("/<name>")
def list_rows(ns: str, name: str):
    table = _table(name)
    skip, limit = paging(table)
    return jsonify(core().tables.list(_scope(ns, table), table, skip=skip, limit=limit))


@blueprint.get("/<name>/<path:row_id>")
def get_row(ns: str, name: str, row_id: str):
    table = _table(name)
    row = core().tables.get(_scope(ns, table), table, row_id)
    if row is None:
        raise not_found()
    return jsonify(row.model_dump())


@blueprint.post("/jobs")
def submit_job(ns: str):
    """Submit a job: one activation per parameter set, admitted together."""
    service, canary = gateway(), core()
    body = model(JobBody)
    allowed = service.settings.gateway.max_payload_bytes  # each activation's, as an invoke's body
    for params in body.params:
        if (size := jsonvalues.encoded_size(params)) > allowed:
            raise too_big("Request", size, allowed)
    resolved = service.catalog.resolve(parse_relative(namespace(ns), body.action), caller().namespace)
    if not canary.accepts(resolved):
        raise bad_request(NOT_STATEFUL.format(action=body.action))
    if not canary.fits_ever(resolved, len(body.params)):
        raise bad_request(NEVER_FITS.format(count=len(body.params), memory=resolved.limits["memory"]))
    job_id = new_id()
    ids = [new_id() for _ in body.params]
    canary.expect_job(resolved.caller, resolved, job_id, ids)
    try:
        service.invoker.start_all(caller(), resolved, body.params, activation_ids=ids)
    except ApiError:
        canary.forget_job(resolved.caller, job_id, ids)
        raise
    return jsonify(jobId=job_id, activationIds=ids), 202


def check_action(doc: dict[str, Any]) -> None:
    """An action as it would be stored: a malformed ``canary`` annotation, or one on a sequence, is a
    400 and nothing is stored."""
    for item in doc["annotations"]:
        if item["key"] == ANNOTATION and item["value"] not in (False, None):
            if doc["exec"]["kind"] == "sequence":
                raise bad_request(SEQUENCE_STATEFUL)
            try:
                parse_options(item["value"], strict=True)
            except BadAnnotation as exc:
                raise bad_request(str(exc)) from None


def check_copies_fit(canary: CanaryCore, doc: dict[str, Any]) -> None:
    """An action whose request-replication copies could never run at once here is a 400: admitted, its
    copies would be held past the nodes' memory, at every other tenant's cost."""
    options = options_of(doc)
    if options is not None and not canary.copies_fit(doc):
        raise bad_request(COPIES_NEVER_FIT.format(copies=options.copies, memory=doc["limits"]["memory"]))


def register(app: Flask) -> None:
    app.register_blueprint(blueprint)
