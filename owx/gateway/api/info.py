"""``/``, ``/api/v1``, namespaces and their limits."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify

from owx.gateway.api.request_args import caller, gateway, namespace
from owx.gateway.action_limits import system_limits
from owx.gateway.models import KINDS, MB, PARAMETER_SIZE_LIMIT

blueprint = Blueprint("info", __name__)
DEFAULT_PYTHON_KIND = "python:3"  # what python:default runs


@blueprint.get("/")
def root():
    """API versions, system limits and runtimes, where OpenWhisk's controller serves them (wskdeploy
    reads the runtimes here)."""
    return jsonify(description="owx: OpenWhisk for long-running, stateful functions", api_paths=["/api/v1"],
                   **_limits_and_runtimes())


@blueprint.get("/api/v1", strict_slashes=False)
def api_info():
    """API version (as ``wsk property get`` reads it); the limits and runtimes of ``/`` too."""
    return jsonify(
        description="OpenWhisk API (owx)",
        api_version="1.0.0",
        api_version_path="v1",
        build="owx",
        buildno="0.1.0",
        swagger_paths={"api-docs": "/api/v1/api-docs"},
        **_limits_and_runtimes(),
    )


def _limits_and_runtimes() -> dict[str, Any]:
    service = gateway()
    return {
        "limits": system_limits(service.catalog.limits, service.settings.gateway, service.platform.limits()),
        "runtimes": {"python": [_runtime(k, default=k == DEFAULT_PYTHON_KIND) for k in KINDS
                                if k.startswith("python:") and k != "python:default"],
                     "blackbox": [_runtime("blackbox", default=True)]},
    }


def _runtime(kind: str, default: bool) -> dict[str, Any]:
    """One runtime as OpenWhisk's manifest lists it (no image: the platform chooses it)."""
    return {"kind": kind, "deprecated": False, "default": default, "attached": False, "requireMain": False}


@blueprint.get("/api/v1/namespaces")
def namespaces():
    """The namespaces the caller's key opens."""
    return jsonify([caller().namespace])


@blueprint.get("/api/v1/namespaces/<ns>/limits")
def limits(ns: str):
    """The caller's limits, in OpenWhisk's fields and units: memory and logs in MB, times in ms."""
    namespace(ns)
    service = gateway()
    limits, throttles = service.catalog.limits, service.settings.gateway
    return jsonify(
        invocationsPerMinute=throttles.invocations_per_minute,
        concurrentInvocations=throttles.concurrent_invocations,
        firesPerMinute=throttles.trigger_fires_per_minute,
        minActionMemory=limits.memory_mb.min,
        maxActionMemory=limits.memory_mb.max,
        minActionLogs=limits.logs_mb.min,
        maxActionLogs=limits.logs_mb.max,
        minActionTimeout=limits.timeout_ms.min,
        maxActionTimeout=limits.timeout_ms.max,
        minActionConcurrency=limits.concurrency.min,
        maxActionConcurrency=limits.concurrency.max,
        maxParameterSize=f"{PARAMETER_SIZE_LIMIT // MB} MB",
        maxActionInstances=throttles.concurrent_invocations,
    )
