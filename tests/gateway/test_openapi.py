"""The served OpenAPI document is valid, describes the routes the server has, and drives schemathesis:
for a bounded time, generated valid and invalid requests never get a 5xx (but an invoke's 502, OpenWhisk's
answer when the action itself failed: its record, which the document describes) and every error is
OpenWhisk's ``{error, code}``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from openapi_spec_validator import validate

from owx.gateway.app import create_app

SCHEMATHESIS = [sys.executable, "-c", "from schemathesis.cli import schemathesis; schemathesis()"]
# a blocking invoke of an action that fails (generated code does) answers 502 with the record, as OpenWhisk's
ACTION_FAILURES_ARE_NOT_OURS = """
[[operations]]
include-operation-id = "actions.invoke.post"
checks.not_a_server_error.expected-statuses = ["2xx", "3xx", "4xx", "502"]
"""


@pytest.fixture(scope="module")
def document(gateway) -> dict:
    answer = requests.get(gateway.url + "/api/v1/api-docs")
    assert answer.status_code == 200
    return answer.json()


def test_document_is_valid_openapi(document):
    validate(document)  # raises on any error (broken $refs included)
    assert document["openapi"] == "3.1.0"
    action = document["paths"]["/api/v1/namespaces/{ns}/actions/{name}"]["put"]
    assert action["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ActionBody"}
    assert "ExecBody" in document["components"]["schemas"]


def test_document_describes_every_route(gateway, document):
    app = create_app(gateway.service)
    served = {(re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", r"{\1}", rule.rule).rstrip("/") or "/", method.lower())
              for rule in app.url_map.iter_rules() if rule.endpoint != "static"
              for method in rule.methods - {"HEAD", "OPTIONS"}}
    served.add(("/api/v1/namespaces/{ns}/actions/{name}", "post"))  # invoke: served on the event loop
    assert served == {(path, method) for path, methods in document["paths"].items() for method in methods}
    invoke = document["paths"]["/api/v1/namespaces/{ns}/actions/{name}"]["post"]
    assert {p["name"]: p["schema"] for p in invoke["parameters"] if p["in"] == "query"} == {
        "blocking": {"type": "boolean"}, "result": {"type": "boolean"},
        "timeout": {"type": "integer", "minimum": 1, "maximum": 60000}}
    assert {"200", "202"} <= set(invoke["responses"])
    listing = document["paths"]["/api/v1/namespaces/{ns}/activations"]["get"]["parameters"]
    assert {p["name"] for p in listing} == {"ns", "name", "since", "upto", "skip", "limit", "count", "docs"}


@pytest.mark.slow
@pytest.mark.parametrize("namespace, seconds", [(None, 40), ("_", 60)], ids=["any-namespace", "own-namespace"])
def test_schemathesis_finds_no_server_error(gateway, tmp_path: Path, namespace, seconds):
    """Bounded run (``seconds``): first with generated namespaces (mostly refused: 400/403), then with
    the caller's own so that bodies and query strings reach the handlers."""
    config = tmp_path / "schemathesis.toml"
    config.write_text((f'[parameters]\nns = "{namespace}"\n' if namespace else "") + ACTION_FAILURES_ARE_NOT_OURS)
    done = subprocess.run(
        [*SCHEMATHESIS, "--config-file", str(config), "run", f"{gateway.url}/api/v1/api-docs",
         "--auth", gateway.auth, "--max-time", str(seconds), "--suppress-health-check", "all",
         "--checks", "not_a_server_error,response_schema_conformance", "--seed", "7"],
        capture_output=True, text=True, timeout=seconds * 3 + 60, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout


def test_the_document_is_made_once_not_on_every_request(gateway, monkeypatch):
    """Anyone may ask for it, without a key: made on every request (35 ms each), a client asking in a
    loop made every tenant's requests wait."""
    from owx.gateway.api import openapi

    first = requests.get(gateway.url + "/api/v1/api-docs")

    def made_again():
        raise AssertionError("the document was made again")

    monkeypatch.setattr(openapi, "document", made_again)
    again = requests.get(gateway.url + "/api/v1/api-docs")
    assert again.status_code == 200 and again.content == first.content
