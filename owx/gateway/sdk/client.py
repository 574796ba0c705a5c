"""A small client of OpenWhisk's REST API (what ``wsk`` does, from Python)."""

from __future__ import annotations

import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

import requests

from owx.gateway import wskprops

POLL_START_S, POLL_MAX_S = 0.005, 0.25


class OwxError(Exception):
    """The server answered an error: ``status``, OpenWhisk's ``error`` text and transaction ``code``."""

    def __init__(self, status: int, error: str, code: str | None = None) -> None:
        super().__init__(f"{status}: {error}")
        self.status, self.error, self.code = status, error, code


class ActionFailed(Exception):
    """An activation ended in an application, developer or internal error."""

    def __init__(self, activation: dict[str, Any]) -> None:
        response = activation.get("response", {})
        result = response.get("result") or {}
        super().__init__(f"{response.get('status')}: {result.get('error', result) if isinstance(result, dict) else result}")
        self.activation = activation


class Client:
    """``apihost`` and ``auth`` default to ``~/.wskprops`` (or ``__OW_API_HOST``/``__OW_API_KEY``).

    HTTPS certificates are verified: against ``ca`` (a PEM file) when given, else against the CA
    ``owx up`` wrote into ``~/.wskprops`` with its apihost, else the system's; ``insecure=True``
    (as ``wsk -i``) skips the check.
    """

    def __init__(self, apihost: str | None = None, auth: str | None = None, namespace: str = "_",
                 ca: str | None = None, insecure: bool = False) -> None:
        props = wskprops.read()
        from_props = not apihost and not os.environ.get("__OW_API_HOST")
        host = apihost or os.environ.get("__OW_API_HOST") or props.get("APIHOST")
        key = auth or os.environ.get("__OW_API_KEY") or props.get("AUTH")
        if not host or not key:
            raise OwxError(0, "no apihost/auth: pass them, or run `owx up` to write ~/.wskprops")
        self.apihost = host if host.startswith("http") else f"https://{host}"
        self.namespace = namespace
        self.session = requests.Session()
        self.session.auth = tuple(key.split(":", 1))  # type: ignore[assignment]
        owx_ca = props.get(wskprops.CA_KEY) if from_props else None
        # per request: a session's own setting loses to REQUESTS_CA_BUNDLE in requests
        self.verify: bool | str = False if insecure else (ca or owx_ca or True)
        self._pollers = ThreadPoolExecutor(32, thread_name_prefix="owx-sdk-poll")

    def _url(self, collection: str, name: str = "") -> str:
        """The URL of ``name`` in ``collection``: ``[pkg/]name`` in the client's namespace, or fully
        qualified, ``/namespace/[pkg/]name`` (``_``: the key's own), as wsk takes names."""
        namespace = self.namespace
        if name.startswith("/"):
            namespace, _, name = name[1:].partition("/")
        base = f"{self.apihost}/api/v1/namespaces/{quote(namespace)}/{collection}"
        return f"{base}/{quote(name)}" if name else base

    def _call(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        response = self.session.request(method, url, timeout=kwargs.pop("timeout", 330), verify=self.verify, **kwargs)
        if response.status_code >= 400 and response.status_code != 502:
            try:
                body = response.json()
            except ValueError:
                body = {"error": response.text}
            raise OwxError(response.status_code, body.get("error", response.text), body.get("code"))
        return response

    # -- actions -----------------------------------------------------------
    def put_action(self, name: str, code: str | None = None, *, kind: str = "python:3", main: str = "main",
                   limits: dict[str, int] | None = None, parameters: dict[str, Any] | None = None,
                   annotations: dict[str, Any] | None = None, image: str | None = None,
                   components: list[str] | None = None, overwrite: bool = True) -> dict[str, Any]:
        """Create or update an action."""
        exec_doc: dict[str, Any] = {"kind": kind}
        if code is not None:
            exec_doc.update(code=code, main=main)
        if image:
            exec_doc["image"] = image
        if components:
            exec_doc["components"] = components
        body: dict[str, Any] = {"exec": exec_doc}
        if limits:
            body["limits"] = limits
        if parameters is not None:
            body["parameters"] = [{"key": k, "value": v} for k, v in parameters.items()]
        if annotations is not None:
            body["annotations"] = [{"key": k, "value": v} for k, v in annotations.items()]
        return self._call("PUT", self._url("actions", name), params={"overwrite": str(overwrite).lower()},
                          json=body).json()

    def get_action(self, name: str, code: bool = True) -> dict[str, Any]:
        return self._call("GET", self._url("actions", name), params={"code": str(code).lower()}).json()

    def list_actions(self, limit: int = 30, skip: int = 0) -> list[dict[str, Any]]:
        return self._call("GET", self._url("actions"), params={"limit": limit, "skip": skip}).json()

    def delete_action(self, name: str) -> dict[str, Any]:
        return self._call("DELETE", self._url("actions", name)).json()

    # -- invocations -------------------------------------------------------
    def invoke(self, name: str, params: dict[str, Any] | None = None) -> Any:
        """Blocking invocation; the result, or :class:`ActionFailed`."""
        record = self.invoke_record(name, params)
        if not record.get("response", {}).get("success"):
            raise ActionFailed(record)
        return record["response"]["result"]

    def invoke_record(self, name: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Blocking invocation; the whole activation (waits past the server's blocking limit)."""
        response = self._call("POST", self._url("actions", name), params={"blocking": "true"}, json=params or {})
        body = response.json()
        if response.status_code == 202:
            return self.wait(body["activationId"])
        if isinstance(body, list):  # an array result is answered alone (OpenWhisk's): its record is read
            return self.wait(response.headers["X-OpenWhisk-Activation-Id"])
        return body

    def invoke_async(self, name: str, params: dict[str, Any] | None = None) -> str:
        """Non-blocking invocation; the activation id."""
        return self._call("POST", self._url("actions", name), json=params or {}).json()["activationId"]

    def submit(self, name: str, params: dict[str, Any] | None = None) -> Future[dict[str, Any]]:
        """Non-blocking invocation; a future over its activation record."""
        activation_id = self.invoke_async(name, params)
        return self._pollers.submit(self.wait, activation_id)

    # -- activations -------------------------------------------------------
    def activation(self, activation_id: str) -> dict[str, Any] | None:
        try:
            return self._call("GET", self._url("activations", activation_id)).json()
        except OwxError as exc:
            if exc.status == 404:
                return None
            raise

    def wait(self, activation_id: str, timeout: float = 3600.0) -> dict[str, Any]:
        """Poll until the activation's record exists (backing off to 250 ms)."""
        deadline, delay = time.monotonic() + timeout, POLL_START_S
        while True:
            record = self.activation(activation_id)
            if record is not None:
                return record
            if time.monotonic() > deadline:
                raise TimeoutError(f"activation {activation_id} not done after {timeout} s")
            time.sleep(delay)
            delay = min(POLL_MAX_S, delay * 2)

    def activations(self, name: str | None = None, limit: int = 30, docs: bool = False) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"limit": limit, "docs": str(docs).lower()}
        if name:
            params["name"] = name
        return self._call("GET", self._url("activations"), params=params).json()

    def api_info(self) -> dict[str, Any]:
        """``GET /api/v1``: the platform's description, with its action limits."""
        return self._call("GET", f"{self.apihost}/api/v1", timeout=30).json()

    def get(self, path: str, **params: Any) -> Any:
        """GET any route under the namespace (e.g. ``canary/jobs``)."""
        return self._call("GET", f"{self.apihost}/api/v1/namespaces/{quote(self.namespace)}/{path}",
                          params=params).json()

    def post(self, path: str, body: dict[str, Any]) -> Any:
        """POST JSON to any route under the namespace (e.g. ``canary/jobs``)."""
        return self._call("POST", f"{self.apihost}/api/v1/namespaces/{quote(self.namespace)}/{path}",
                          json=body).json()

    def close(self) -> None:
        self._pollers.shutdown(wait=False, cancel_futures=True)
        self.session.close()
