"""OpenWhisk's npm client drives triggers, rules, a binding and the alarms feed."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

NPM_DIR = Path(__file__).resolve().parents[1] / "npm"
FLOW = Path(__file__).with_name("npm_triggers_flow.js")


def test_npm_client_triggers_rules_and_alarm_feed(gateway):
    assert (NPM_DIR / "node_modules" / "openwhisk").is_dir(), "run `npm ci --prefix tests/npm` (the test setup does)"
    suffix = uuid.uuid4().hex[:8]
    env = {**os.environ, "OW_APIHOST": gateway.url, "OW_AUTH": gateway.auth, "NODE_PATH": str(NPM_DIR / "node_modules")}
    done = subprocess.run(["node", str(FLOW), suffix], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["feed"]["response"]["result"] == {"status": "success"}
    assert seen["rule"]["status"] == "active" and seen["rule"]["action"]["name"] == f"npm-act-{suffix}"
    assert seen["ticks"] >= 3, f"an alarm every second fired its rule's action {seen['ticks']} times in 20 s"
    assert seen["feedRead"]["response"]["result"]["config"]["cron"] == "* * * * * *"
    assert seen["disabled"] == "inactive"
    assert seen["feedDeleted"]["response"]["result"] == {"status": "success"}
    assert not seen["fireDisabled"]  # 204: no active rule, no record
    assert seen["afterFire"] == 1
    line = json.loads(seen["triggerRecord"]["logs"][0])
    assert line["success"] and line["rule"].endswith(f"npm-rule-{suffix}")
    assert f"npm-rule-{suffix}" in seen["rules"] and f"npm-trg-{suffix}" in seen["triggers"]
    assert seen["binding"]["binding"]["name"] == f"npm-pub-{suffix}"
    assert seen["ruleDeleted"]["name"] == f"npm-rule-{suffix}"
    assert seen["triggerDeleted"]["name"] == f"npm-trg-{suffix}" and seen["afterDelete"] == 404
