"""CORS headers as OpenWhisk's controller sends them: a page from any origin may call the REST API
and web actions. Only with a key it holds and sends itself: the headers allow no credentials (no
cookie or browser-cached login is ever sent along)."""

from __future__ import annotations

ALLOWED_HEADERS = "Authorization, Origin, X-Requested-With, Content-Type, Accept, User-Agent"
#: On every answer of the REST API (``/api/v1``, but web actions).
API = {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Headers": ALLOWED_HEADERS,
       "Access-Control-Allow-Methods": "GET, DELETE, POST, PUT, HEAD"}
#: On a web action's answers, unless it takes CORS over (``web-custom-options``).
WEB_ACTIONS = {**API, "Access-Control-Allow-Methods": "OPTIONS, GET, DELETE, POST, PUT, HEAD, PATCH"}


def is_api(path: str) -> bool:
    """Whether ``path`` is the REST API's, whose answers carry :data:`API`."""
    return path.startswith("/api/v1") and not path.startswith("/api/v1/web/")
