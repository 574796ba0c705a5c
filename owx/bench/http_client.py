"""A cheap keep-alive HTTP client, latency arithmetic, and ``requests`` sessions from a client address
of their own, so that the server is what a bench measures."""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import requests
import requests.adapters


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Connection:
    """One keep-alive connection sending JSON, with Basic auth when given."""

    def __init__(self, url_or_port: str | int, auth: str | None = None, cafile: Path | None = None) -> None:
        """``https`` URLs are verified against ``cafile`` (else the system's CAs)."""
        if isinstance(url_or_port, int):
            url_or_port = f"http://127.0.0.1:{url_or_port}"
        parts = urlsplit(url_or_port)
        host = parts.hostname or "127.0.0.1"
        self.conn = (http.client.HTTPSConnection(host, parts.port or 443, context=ssl.create_default_context(cafile=cafile))
                     if parts.scheme == "https" else http.client.HTTPConnection(host, parts.port or 80))
        self.headers = {"Content-Type": "application/json"}
        if auth:
            self.headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()

    def post(self, path: str, body: dict) -> tuple[int, bytes]:
        return self.request("POST", path, body)

    def put(self, path: str, body: dict) -> tuple[int, bytes]:
        return self.request("PUT", path, body)

    def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
        self.conn.request(method, path, json.dumps(body) if body is not None else None, self.headers)
        response = self.conn.getresponse()
        return response.status, response.read()


def timed(call: Callable[[int], tuple[int, bytes]], n: int) -> list[float]:
    """Seconds each of ``n`` calls took, from the client's clock; every call must answer 200."""
    samples = []
    for i in range(n):
        start = time.perf_counter()
        status, body = call(i)
        samples.append(time.perf_counter() - start)
        if status != 200:
            raise RuntimeError(f"call {i} answered {status}: {body[:300]!r}")
    return samples


def from_address(session: requests.Session, address: str) -> requests.Session:
    """``session`` with its HTTP connections made from the local ``address`` (another client, as the
    server sees it: any of 127/8 reaches this machine)."""
    session.mount("http://", _SourceAddress(address))
    return session


class _SourceAddress(requests.adapters.HTTPAdapter):
    def __init__(self, address: str) -> None:
        self._address = address
        super().__init__()

    def init_poolmanager(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().init_poolmanager(*args, source_address=(self._address, 0), **kwargs)
