"""The running gateway's admin socket: ``<data_dir>/admin.sock``, mode 0600, so only the owner of the
instance (root, or who started it) administers it while it runs and holds its store.

A small JSON API over HTTP on the Unix socket; :class:`AdminClient` is its client.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from flask import Flask, jsonify, request
from pydantic import BaseModel, ConfigDict, ValidationError

from owx.gateway.admin.accounts import StoredAccounts
from owx.gateway.admin.users import AdminError, UserKey, Users
from owx.gateway.identity import Authenticator

SOCKET_NAME = "admin.sock"


class CreateBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    subject: str
    namespace: str | None = None
    auth: str | None = None


class AccountBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    auth: str


def admin_app(users: Users, auth: Authenticator, accounts: StoredAccounts) -> Flask:
    """The admin API over ``users`` and upstream ``accounts``; keys created, deleted or rotated take
    effect at once (``auth`` learns of them), accounts apply from the next invocation on."""
    app = Flask("owx.admin")

    @app.errorhandler(AdminError)
    def _refused(exc: AdminError):
        return jsonify(error=str(exc)), 400

    @app.errorhandler(ValidationError)
    def _invalid(exc: ValidationError):
        return jsonify(error=str(exc)), 400

    @app.post("/users")
    def create():
        body = CreateBody.model_validate(request.get_json(force=True, silent=True) or {})
        key = users.create(body.subject, body.namespace, body.auth)
        auth.created(key.namespace, key.uuid)  # it and its web actions answer at once, even if asked for before
        return jsonify(asdict(key))

    @app.get("/users")
    def listing():
        return jsonify([asdict(k) for k in users.keys(request.args.get("subject"))])

    @app.delete("/users/<subject>")
    def delete(subject: str):
        removed = users.delete(subject, request.args.get("namespace"))
        for key in removed:
            auth.forget(key.uuid)
        return jsonify([asdict(k) for k in removed])

    @app.post("/users/<subject>/rotate")
    def rotate(subject: str):
        fresh = users.rotate(subject, request.args.get("namespace"))
        auth.forget(fresh.uuid)
        return jsonify(asdict(fresh))

    @app.put("/accounts/<namespace>")
    def set_account(namespace: str):
        body = AccountBody.model_validate(request.get_json(force=True, silent=True) or {})
        return jsonify(uuid=accounts.set(namespace, body.auth))

    @app.delete("/accounts/<namespace>")
    def unset_account(namespace: str):
        accounts.unset(namespace)
        return jsonify({})

    @app.get("/accounts")
    def list_accounts():
        return jsonify(accounts.uuids())

    return app


def bind_admin_socket(data_dir: Path) -> socket.socket:
    """The data dir's admin socket, listening, owner-only (one left by a killed gateway is replaced)."""
    path = data_dir / SOCKET_NAME
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old_umask)
    os.chmod(path, 0o600)
    return sock


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = str(path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


class AdminClient:
    """Talks to a running gateway's admin socket."""

    def __init__(self, data_dir: Path, timeout: float = 10.0) -> None:
        self.path = data_dir / SOCKET_NAME
        self.timeout = timeout

    def reachable(self) -> bool:
        if not self.path.exists():
            return False
        try:
            self._call("GET", "/users" + _query(subject="-"))
            return True
        except (OSError, AdminError):
            return False

    def create(self, subject: str, namespace: str | None, auth: str | None) -> UserKey:
        return UserKey(**self._call("POST", "/users", {"subject": subject, "namespace": namespace, "auth": auth}))

    def keys(self, subject: str | None) -> list[UserKey]:
        return [UserKey(**k) for k in self._call("GET", "/users" + _query(subject=subject))]

    def delete(self, subject: str, namespace: str | None) -> list[UserKey]:
        return [UserKey(**k) for k in self._call("DELETE", f"/users/{quote(subject, safe='')}" + _query(namespace=namespace))]

    def rotate(self, subject: str, namespace: str | None) -> UserKey:
        return UserKey(**self._call("POST", f"/users/{quote(subject, safe='')}/rotate" + _query(namespace=namespace)))

    def set(self, namespace: str, auth: str) -> str:
        return self._call("PUT", f"/accounts/{quote(namespace, safe='')}", {"auth": auth})["uuid"]

    def unset(self, namespace: str) -> None:
        self._call("DELETE", f"/accounts/{quote(namespace, safe='')}")

    def uuids(self) -> dict[str, str]:
        return self._call("GET", "/accounts")

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        conn = _UnixConnection(self.path, self.timeout)
        try:
            conn.request(method, path, body=json.dumps(body) if body is not None else None,
                         headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            answer = json.loads(response.read() or b"null")
        finally:
            conn.close()
        if response.status != 200:
            raise AdminError(answer.get("error") if isinstance(answer, dict) else f"admin socket answered {response.status}")
        return answer


def _query(**params: str | None) -> str:
    given = {k: v for k, v in params.items() if v}
    return "?" + urlencode(given) if given else ""
