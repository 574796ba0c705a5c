"""``/``, ``/api/v1``, namespaces and their limits."""

from __future__ import annotations

from flask import Blueprint, jsonify

from owx.gateway.api.request_args import caller, gateway, namespace
from owx.gateway.action_limits import MB, system_limits
from owx.gateway.models import KINDS

blueprint = Blueprint("info", __name__)


@blueprint.get("/")
def root():
    """Which API versions this server offers."""
    return jsonify(description="owx: OpenWhisk for long-running, stateful functions", api_paths=["/api/v1"])


@blueprint.get("/api/v1")
def api_info():
    """API version, limits and runtimes (as ``wsk property get`` reads them)."""
    service = gateway()
    return jsonify(
        description="OpenWhisk API (owx)",
        api_version="1.0.0",
        api_version_path="v1",
        build="owx",
        buildno="0.1.0",
        swagger_paths={"api-docs": "/api/v1/api-docs"},
        limits=system_limits(service.catalog.limits, service.settings.gateway, service.platform.limits()),
        runtimes={"python": [{"kind": k} for k in KINDS if k.startswith("python")], "blackbox": [{"kind": "blackbox"}]},
    )


@blueprint.get("/api/v1/namespaces")
def namespaces():
    """The namespaces the caller's key opens."""
    return jsonify([caller().namespace])


@blueprint.get("/api/v1/namespaces/<ns>/limits")
def limits(ns: str):
    """The caller's invocation limits."""
    namespace(ns)
    service = gateway()
    limits, throttles = service.catalog.limits, service.settings.gateway
    return jsonify(
        invocationsPerMinute=throttles.invocations_per_minute,
        concurrentInvocations=throttles.concurrent_invocations,
        firesPerMinute=throttles.trigger_fires_per_minute,
        minActionMemory=limits.memory_mb.min * MB,
        maxActionMemory=limits.memory_mb.max * MB,
        minActionTimeout=limits.timeout_ms.min,
        maxActionTimeout=limits.timeout_ms.max,
        minActionLogSize=limits.logs_mb.min * MB,
        maxActionLogSize=limits.logs_mb.max * MB,
        maxActionConcurrency=limits.concurrency.max,
    )
