"""``GET /metrics``: Prometheus text, no authentication (as a node exporter's); every API request timed."""

from __future__ import annotations

import time

from flask import Blueprint, Response, g, request
from prometheus_client import CONTENT_TYPE_LATEST

from owx.gateway import errors
from owx.gateway.api.request_args import gateway
from owx.gateway.errors import ApiError

blueprint = Blueprint("metrics", __name__)
UNMATCHED = "unmatched"


@blueprint.get("/metrics")
def metrics():
    """Every metric of the gateway's registry."""
    registry = gateway().metrics
    if registry is None:
        raise ApiError(503, errors.SYSTEM_UNAVAILABLE.format(detail="metrics are not set up"))
    return Response(registry.text(), content_type=CONTENT_TYPE_LATEST)


@blueprint.before_app_request
def _start_clock() -> None:
    g.request_started = time.perf_counter()


@blueprint.after_app_request
def _time(response):
    started, metrics = g.get("request_started"), gateway().metrics
    if started is not None and metrics is not None:
        route = request.url_rule.rule if request.url_rule is not None else UNMATCHED
        metrics.request(request.method, route, response.status_code, time.perf_counter() - started)
    return response
