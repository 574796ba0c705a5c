"""The Flask application factory: blueprints, error bodies, transaction ids."""

from __future__ import annotations

import logging

from flask import Flask, Response, g, jsonify, request
from flask.json.provider import DefaultJSONProvider
from werkzeug.exceptions import HTTPException

from owx.common import jsonvalues
from owx.gateway import cors, errors
from owx.gateway.api import actions, activations, info, metrics, openapi, packages, rules, triggers, web
from owx.gateway.errors import ApiError
from owx.gateway.ids import new_id, transaction_id
from owx.gateway.service import Gateway
from owx.gateway.stores import InvalidInput, QuotaExceeded, StoreUnavailable

log = logging.getLogger(__name__)
MAX_ENTITY_BYTES = 48 * 1024 * 1024  # OpenWhisk's largest action code, plus envelope
BLUEPRINTS = (info, actions, packages, activations, triggers, rules, web, openapi, metrics)


class OrjsonProvider(DefaultJSONProvider):
    """Flask's JSON answers encoded by orjson (`jsonvalues.dumps`), compact, non-ASCII as UTF-8: a
    record with 20,000 log lines takes 0.3 ms instead of 1.9, and the interpreter lock with it, which
    every other request waits for."""

    def dumps(self, obj: object, **kwargs: object) -> str:
        return jsonvalues.dumps(obj).decode()

    def response(self, *args: object, **kwargs: object) -> Response:
        return self._app.response_class(jsonvalues.dumps(self._prepare_response_obj(args, kwargs)) + b"\n",
                                        mimetype=self.mimetype)


def _error(status: int, message: str, headers: dict[str, str] | None = None):
    response = jsonify(error=message, code=g.get("transaction_id") or new_id())
    response.status_code = status
    response.headers.update(headers or {})
    return response


def create_app(gateway: Gateway) -> Flask:
    """A WSGI app serving OpenWhisk's REST API over ``gateway``."""
    app = Flask("owx.gateway")
    app.json = OrjsonProvider(app)
    app.config["MAX_CONTENT_LENGTH"] = MAX_ENTITY_BYTES
    app.url_map.merge_slashes = False  # ``actions//x`` names no entity: a JSON 404, not a redirect to an HTML page
    app.extensions["owx"] = gateway
    for module in BLUEPRINTS:
        app.register_blueprint(module.blueprint)
    for register in gateway.blueprints:
        register(app)

    @app.before_request
    def _transaction() -> None:
        g.transaction_id = transaction_id(request.headers.get("X-Request-ID"))

    @app.after_request
    def _tag(response):
        response.headers["X-Request-ID"] = g.get("transaction_id", "")
        if cors.is_api(request.path):
            response.headers.update(cors.API)
        return response

    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError):
        return _error(exc.status, exc.message, exc.headers)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException):
        messages = {404: errors.NOT_FOUND, 405: errors.METHOD_NOT_ALLOWED}
        if exc.code == 413:
            return _error(413, errors.ENTITY_TOO_BIG.format(
                field="Request", size=request.content_length, allowed=MAX_ENTITY_BYTES))
        return _error(exc.code or 500, messages.get(exc.code or 0, exc.description or exc.name))

    @app.errorhandler(StoreUnavailable)
    def _store_down(exc: StoreUnavailable):
        log.error("store unavailable: %s", exc)
        return _error(503, errors.SYSTEM_UNAVAILABLE.format(detail=exc))

    @app.errorhandler(InvalidInput)
    def _refused_by_store(exc: InvalidInput):  # a key no check before the store's turned away (a row id)
        return _error(400, errors.MALFORMED.format(detail=exc))

    @app.errorhandler(QuotaExceeded)
    def _over_quota(exc: QuotaExceeded):
        return _error(403, str(exc))

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):
        log.exception("unhandled error")
        return _error(500, errors.INTERNAL)

    return app
