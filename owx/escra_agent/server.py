"""HTTP face of the resource allocator (``owx agent --controller``): Flask app behind waitress."""

from __future__ import annotations

import logging
from collections.abc import Callable

from flask import Flask, Response, request
from pydantic import BaseModel, ValidationError

from owx.common import bearer
from owx.escra_agent.allocator import ResourceAllocator, StaleAgent, UnknownContainer
from owx.escra_agent.messages import AppLimits, ErrorBody, Heartbeat, OomEvent, Register, TelemetryBatch

log = logging.getLogger(__name__)


def _error(status: int, message: str) -> Response:
    return Response(ErrorBody(error=message, code=status).model_dump_json(), status=status, mimetype="application/json")


def _json(model: BaseModel) -> Response:
    return Response(model.model_dump_json(), status=200, mimetype="application/json")


def _parse(model: type[BaseModel]) -> BaseModel:
    if not request.is_json:
        raise ValueError("request body must be JSON (Content-Type: application/json)")
    return model.model_validate_json(request.get_data())


def _validation_message(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "body"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"invalid {exc.title}: {where}: {first['msg']}{more}"


def create_app(allocator: ResourceAllocator, token: str | None = None) -> Flask:
    """The allocator's routes; every body is validated before the allocator sees it, and with a
    ``token`` every request must show it (:mod:`owx.common.bearer`)."""
    app = Flask("owx.escra_agent")

    @app.before_request
    def _authorized() -> Response | None:
        if not bearer.authorized(request.headers.get("Authorization"), token):
            return _error(401, "the allocator needs its token: Authorization: Bearer <OWX_ESCRA_TOKEN>")
        return None

    def endpoint(model: type[BaseModel], handler: Callable[[BaseModel], BaseModel]) -> Callable[[], Response]:
        def view() -> Response:
            try:
                msg = _parse(model)
            except ValidationError as exc:
                return _error(400, _validation_message(exc))
            except ValueError as exc:
                return _error(400, str(exc))
            try:
                return _json(handler(msg))
            except StaleAgent as exc:
                return _error(409, str(exc))
            except UnknownContainer as exc:
                return _error(404, str(exc))

        view.__name__ = f"post_{model.__name__.lower()}"
        return view

    def add_app(limits: AppLimits) -> BaseModel:
        allocator.add_application(limits)
        return allocator.view()

    app.add_url_rule("/v1/register", view_func=endpoint(Register, allocator.register), methods=["POST"])
    app.add_url_rule("/v1/telemetry", view_func=endpoint(TelemetryBatch, allocator.telemetry), methods=["POST"])
    app.add_url_rule("/v1/heartbeat", view_func=endpoint(Heartbeat, allocator.heartbeat), methods=["POST"])
    app.add_url_rule("/v1/oom", view_func=endpoint(OomEvent, allocator.oom), methods=["POST"])
    app.add_url_rule("/v1/apps", view_func=endpoint(AppLimits, add_app), methods=["POST"])
    app.add_url_rule("/v1/state", view_func=lambda: _json(allocator.view()), methods=["GET"])

    @app.errorhandler(ValueError)
    def _conflict(exc: ValueError) -> Response:
        return _error(409, str(exc))

    @app.errorhandler(404)
    def _not_found(_exc: Exception) -> Response:
        return _error(404, f"no route {request.method} {request.path}")

    @app.errorhandler(405)
    def _bad_method(_exc: Exception) -> Response:
        return _error(405, f"method {request.method} not allowed on {request.path}")

    return app


def serve(allocator: ResourceAllocator, host: str, port: int, token: str | None = None) -> None:
    """Serve until interrupted; on an address other machines reach, only with a ``token``."""
    from waitress import serve as waitress_serve

    if not token and not bearer.is_loopback(host):
        raise SystemExit(f"the allocator on {host} needs OWX_ESCRA_TOKEN: without it any container or host that "
                         "reaches it could change every node's limits (or listen on 127.0.0.1)")
    log.info("escra allocator epoch %s on http://%s:%d", allocator.epoch, host, port)
    waitress_serve(create_app(allocator, token), host=host, port=port, threads=4, ident="owx-escra")
