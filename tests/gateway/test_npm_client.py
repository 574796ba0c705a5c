"""OpenWhisk's own npm client (the ``openwhisk`` package) against a running gateway."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

NPM_DIR = Path(__file__).resolve().parents[1] / "npm"
FLOW = Path(__file__).with_name("npm_client_flow.js")


def test_npm_client_full_flow(gateway):
    assert (NPM_DIR / "node_modules" / "openwhisk").is_dir(), "run `npm ci --prefix tests/npm` (the test setup does)"
    name = f"npm-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "OW_APIHOST": gateway.url, "OW_AUTH": gateway.auth, "NODE_PATH": str(NPM_DIR / "node_modules")}
    done = subprocess.run(["node", str(FLOW), name], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
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
