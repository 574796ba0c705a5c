"""A gateway in this process for the trigger, rule, feed and metrics tests."""

from __future__ import annotations

from typing import Any

import requests

from tests.gateway.conftest import RunningGateway, gateway, http  # noqa: F401  (fixtures: a gateway per module)

ECHO = "def main(args):\n    return {'got': args}\n"


def activations_of(http: requests.Session, gateway: RunningGateway, name: str) -> list[dict[str, Any]]:  # noqa: F811
    """Full records of ``name``'s activations, newest first."""
    answer = http.get(gateway.api("activations"), params={"name": name, "docs": "true", "limit": 200})
    assert answer.status_code == 200, answer.text
    return answer.json()
