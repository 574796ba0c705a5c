"""``/``, ``/api/v1``, namespaces and their limits."""

from __future__ import annotations

from flask import Blueprint, jsonify

from owx.gateway.api.request_args import caller, gateway, namespace
from owx.gateway.limits import system_limits
from owx.gateway.models import KINDS

blueprint = Blueprint("info", __name__)


@blueprint.get("/")
def root():
    """Which API versions this server offers."""
    return jsonify(description="owx: OpenWhisk for long-running, stateful functions", api_paths=["/api/v1"])


@blueprint.get("/api/v1")
def api_info():
    """API version, limits and runtimes (as ``wsk property get`` reads them)."""
    settings = gateway().settings
    return jsonify(
        description="OpenWhisk API (owx)",
        api_version="1.0.0",
        api_version_path="v1",
        build="owx",
        buildno="0.1.0",
        swagger_paths={"api-docs": "/api/v1/api-docs"},
        limits=system_limits(settings),
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
    settings = gateway().settings
    return jsonify(
        invocationsPerMinute=settings.invocations_per_minute,
        concurrentInvocations=settings.concurrent_invocations,
        minActionMemory=settings.memory_mb.min * 1024 * 1024,
        maxActionMemory=settings.memory_mb.max * 1024 * 1024,
        minActionTimeout=settings.timeout_ms.min,
        maxActionTimeout=settings.timeout_ms.max,
        minActionLogSize=settings.logs_mb.min * 1024 * 1024,
        maxActionLogSize=settings.logs_mb.max * 1024 * 1024,
        maxActionConcurrency=settings.concurrency.max,
    )
