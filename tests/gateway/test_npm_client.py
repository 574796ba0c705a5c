"""OpenWhisk's own npm client (the ``openwhisk`` package) against a running gateway."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

NPM_DIR = Path(__file__).resolve().parents[1] / "npm"
FLOW = Path(__file__).with_name("npm_client_flow.js")
BINDING_FLOW = Path(__file__).with_name("npm_binding_flow.js")


def run_flow(script: Path, argument: str, **env: str) -> dict:
    assert (NPM_DIR / "node_modules" / "openwhisk").is_dir(), "run `npm ci --prefix tests/npm` (the test setup does)"
    done = subprocess.run(["node", str(script), argument], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NODE_PATH": str(NPM_DIR / "node_modules"), **env})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_npm_client_full_flow(gateway):
    name = f"npm-{uuid.uuid4().hex[:8]}"
    seen = run_flow(FLOW, name, OW_APIHOST=gateway.url, OW_AUTH=gateway.auth)
    assert seen["created"]["name"] == name and seen["duplicateStatus"] == 409
    assert seen["updated"]["limits"]["timeout"] == 20000 and seen["updated"]["version"] == "0.0.2"
    assert seen["fetched"]["exec"]["kind"] == "python:3"
    assert name in seen["listed"]
    assert seen["result"] == {"hello": "npm"}
    assert seen["blockingStatus"] == "success"
    assert seen["activation"]["activationId"] == seen["asyncId"]
    assert seen["activationResult"]["result"] == {"hello": "async"}
    assert any("hi from async" in line for line in seen["activationLogs"]["logs"])
    assert seen["asyncId"] in seen["activationList"]
    assert seen["deleted"]["name"] == name and seen["afterDeleteStatus"] == 404


def test_npm_client_binds_and_invokes_another_namespaces_package(gateway):
    suffix = uuid.uuid4().hex[:6]
    a, b = gateway.tenant(f"npm-a-{suffix}"), gateway.tenant(f"npm-b-{suffix}")
    seen = run_flow(BINDING_FLOW, suffix, OW_APIHOST=gateway.url, OW_AUTH_A=a.auth, OW_AUTH_B=b.auth,
                    OW_NAMESPACE_A=a.namespace)
    assert seen["publicPackages"] == [f"shared-{suffix}"]
    assert seen["hiddenStatus"] == 403 and seen["bindHiddenStatus"] == 403
    assert seen["created"]["binding"] == {"namespace": a.namespace, "name": f"shared-{suffix}"}
    assert seen["binding"]["binding"] == seen["created"]["binding"]
    assert [x["name"] for x in seen["binding"]["actions"]] == ["echo"]
    assert {p["key"]: p["value"] for p in seen["binding"]["parameters"]} == {"p": "pkg", "q": "bind", "r": "pkg"}
    assert seen["viaBinding"] == {"p": "pkg", "q": "bind", "r": "act", "s": "inv"}
    assert seen["direct"] == {"p": "pkg", "q": "pkg", "r": "act"}
    assert seen["putIntoBindingStatus"] == 400
    assert seen["deleted"]["name"] == f"mine-{suffix}"
