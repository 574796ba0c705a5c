"""The wrapping gateway is the API users talk to; every activation runs on the upstream."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from owx.bench.gateway_process import GatewayProcess, start_gateway_process
from owx.platform.interface import PlatformError
from owx.platform.openwhisk.client import UpstreamClient
from owx.platform.openwhisk.naming import upstream_name
from owx.platform.openwhisk.platform import OpenWhiskPlatform
from owx.platform.settings import UpstreamSettings
from owx.platform.types import ActionSpec, RunRequest
from tests.fixtures.polling import wait_for
from tests.upstream.conftest import UPSTREAM_AUTH

NPM_DIR = Path(__file__).resolve().parents[1] / "npm"
FLOW = Path(__file__).resolve().parents[1] / "gateway" / "npm_client_flow.js"
ECHO = "import os\ndef main(args):\n    print('ran in', os.environ.get('__OW_NAMESPACE'))\n    return {'got': args}\n"


def upstream_actions(upstream: GatewayProcess, namespace: str = "guest") -> list[dict]:
    answer = upstream.session().get(upstream.api(f"actions/owx-{namespace}/"))
    return answer.json() if answer.status_code == 200 else []


def test_npm_client_full_flow_through_the_wrapper(wrapper: GatewayProcess, upstream: GatewayProcess) -> None:
    name = f"npm-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "OW_APIHOST": wrapper.url, "OW_AUTH": wrapper.auth, "NODE_PATH": str(NPM_DIR / "node_modules")}
    done = subprocess.run(["node", str(FLOW), name], capture_output=True, text=True, env=env, timeout=180)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["result"] == {"hello": "npm"} and seen["blockingStatus"] == "success"
    assert seen["activationResult"]["result"] == {"hello": "async"}
    assert any("hi from async" in line for line in seen["activationLogs"]["logs"])
    assert seen["afterDeleteStatus"] == 404
    # the flow's record names the upstream activation, which the upstream holds
    upstream_id = next(a["value"] for a in seen["activation"]["annotations"] if a["key"] == "upstreamActivationId")
    assert upstream.session().get(upstream.api(f"activations/{upstream_id}")).status_code == 200
    # the flow deleted its action: no deployment of it is left upstream
    wait_for(lambda: not [a for a in upstream_actions(upstream) if a["name"].startswith(f"{name}@")],
             what="the upstream deployments to be deleted")


def test_actions_land_in_the_tenants_package_with_their_limits(wrapper: GatewayProcess, upstream: GatewayProcess) -> None:
    http = wrapper.session()
    name = f"limits-{uuid.uuid4().hex[:6]}"
    assert http.put(wrapper.api(f"actions/{name}"), json={"exec": {"kind": "python:3", "code": ECHO},
                                                         "limits": {"memory": 384, "timeout": 12_000}}).ok
    record = http.post(wrapper.api(f"actions/{name}"), params={"blocking": "true"}, json={"a": 1}).json()
    assert record["response"]["result"] == {"got": {"a": 1}}  # owx's reserved input never reaches the action
    assert any("ran in guest" in line for line in record["logs"])  # the tenant's namespace, not the upstream's
    peak = next(a["value"] for a in record["annotations"] if a["key"] == "memoryPeak")
    assert 1 << 20 < peak < 384 << 20  # reported by owx's runtime upstream, taken out of the logs
    assert not any("memory-peak" in line for line in record["logs"])
    (deployed,) = [a for a in upstream_actions(upstream) if a["name"].startswith(f"{name}@")]
    assert deployed["limits"]["memory"] == 384 and deployed["limits"]["timeout"] == 12_000
    assert {"key": "provide-api-key", "value": False} in deployed["annotations"]  # never the upstream's key
    # new limits are a new deployment; the old one goes
    assert http.put(wrapper.api(f"actions/{name}"), params={"overwrite": "true"}, json={"limits": {"memory": 512}}).ok
    assert http.post(wrapper.api(f"actions/{name}"), params={"blocking": "true"}).json()["response"]["success"]
    wait_for(lambda: [a["limits"]["memory"] for a in upstream_actions(upstream) if a["name"].startswith(f"{name}@")]
             == [512], what="only the new deployment upstream")


def test_an_action_deleted_upstream_behind_owx_is_deployed_again(wrapper: GatewayProcess,
                                                                 upstream: GatewayProcess) -> None:
    """A warm invoke (sent from the gateway's event loop) of an action someone deleted upstream deploys
    it again and runs it: the caller never sees the upstream's 404."""
    http = wrapper.session()
    name = f"gone-{uuid.uuid4().hex[:6]}"
    assert http.put(wrapper.api(f"actions/{name}"), json={"exec": {"kind": "python:3", "code": ECHO}}).ok
    for n in (1, 2):  # deployed by the first, the second runs it warm
        assert http.post(wrapper.api(f"actions/{name}"), params={"blocking": "true", "result": "true"},
                         json={"n": n}).json() == {"got": {"n": n}}
    (deployed,) = [a["name"] for a in upstream_actions(upstream) if a["name"].startswith(f"{name}@")]
    assert upstream.session().delete(upstream.api(f"actions/owx-guest/{deployed}")).ok
    answer = http.post(wrapper.api(f"actions/{name}"), params={"blocking": "true", "result": "true"}, json={"n": 3})
    assert answer.status_code == 200 and answer.json() == {"got": {"n": 3}}, answer.text
    assert [a["name"] for a in upstream_actions(upstream) if a["name"].startswith(f"{name}@")] == [deployed]


def test_an_action_sees_its_owx_version(wrapper: GatewayProcess) -> None:
    """Upstream, each revision is a deployment of its own at version 0.0.1; the action still sees owx's."""
    http = wrapper.session()
    name = f"version-{uuid.uuid4().hex[:6]}"
    invoke = wrapper.api(f"actions/{name}")
    assert http.put(invoke, json={"exec": {"kind": "python:3", "code": "import os\ndef main(args):\n    return {'version': os.environ.get('__OW_ACTION_VERSION'), 'name': os.environ.get('__OW_ACTION_NAME')}\n"}}).ok
    assert http.put(invoke, params={"overwrite": "true"}, json={"limits": {"memory": 192}}).ok
    for _ in range(2):  # deployed by the first run, warm for the second
        seen = http.post(invoke, params={"blocking": "true", "result": "true"}, json={}).json()
        assert seen == {"version": "0.0.2", "name": f"/guest/{name}"}


SLEEPER = "import time\ndef main(args):\n    time.sleep(args.get('s', 0))\n    return {'slept': args.get('s', 0)}\n"


def test_activations_outlasting_the_upstreams_wait_hold_no_thread(workdir: Path) -> None:
    """An activation the upstream stops waiting for (202) is polled for its record from owx's event
    loop: as many long activations as the loop's default executor has threads (what they held
    before, each until it ended) leave a short one's record as prompt as ever."""
    upstream = start_gateway_process(workdir / "impatient-upstream", args=["--no-extensions"], auth=UPSTREAM_AUTH,
                                     env={"OWX_GATEWAY__BLOCKING_WAIT_S": "0.5", "OWX_PLATFORM__STEM_CELLS": "0"})
    front = start_gateway_process(workdir / "patient-front", args=["--no-extensions", "--upstream", upstream.url,
                                                                   "--upstream-auth", UPSTREAM_AUTH])
    try:
        http = front.session()
        invoke = front.api("actions/sleeper")
        assert http.put(invoke, json={"exec": {"kind": "python:3", "code": SLEEPER}, "limits": {"memory": 128}}).ok
        assert http.post(invoke, params={"blocking": "true"}, json={}).json()["response"]["success"]  # deployed
        default_threads = min(32, (os.cpu_count() or 1) + 4)  # ThreadPoolExecutor's default size
        for _ in range(default_threads):
            assert http.post(invoke, json={"s": 25}).status_code == 202
        time.sleep(1.5)  # the upstream has answered each of them 202: owx polls for their records
        started = time.monotonic()
        short = http.post(invoke, json={"s": 2}).json()["activationId"]
        def short_record() -> dict | None:
            answer = http.get(front.api(f"activations/{short}"))
            return answer.json() if answer.status_code == 200 else None

        record = wait_for(short_record, timeout=20, what="the short activation's record")
        assert record["response"]["result"] == {"slept": 2}
        assert time.monotonic() - started < 10, "the short activation waited for a long one to end"
    finally:
        front.stop()
        upstream.stop()


def test_an_array_result_comes_through(wrapper: GatewayProcess, upstream: GatewayProcess) -> None:
    """The upstream answers an array result alone, without its record (OpenWhisk's): owx reads the
    record the answer's activation id names, on the first (deploying) run and on warm ones."""
    http = wrapper.session()
    name = f"array-{uuid.uuid4().hex[:6]}"
    code = "def main(args):\n    return [args.get('n'), 'x']\n"
    assert http.put(wrapper.api(f"actions/{name}"), json={"exec": {"kind": "python:3", "code": code}}).ok
    for n in (1, 2, 3):
        answer = http.post(wrapper.api(f"actions/{name}"), params={"blocking": "true"}, json={"n": n})
        assert answer.status_code == 200 and answer.json() == [n, "x"], answer.text
        record = http.get(wrapper.api(f"activations/{answer.headers['x-openwhisk-activation-id']}")).json()
        assert record["response"]["result"] == [n, "x"] and record["response"]["success"]
        upstream_id = next(a["value"] for a in record["annotations"] if a["key"] == "upstreamActivationId")
        assert upstream.session().get(upstream.api(f"activations/{upstream_id}/result")).json()["result"] == [n, "x"]


def test_tenants_are_apart_upstream(wrapper: GatewayProcess, upstream: GatewayProcess) -> None:
    created = subprocess.run(["owx", "admin", "--data-dir", str(wrapper.data_dir), "user", "create", "tenant-b"],
                             capture_output=True, text=True, timeout=60)
    assert created.returncode == 0, created.stderr
    http_a, http_b = wrapper.session(), requests.Session()
    http_b.auth = tuple(created.stdout.strip().split(":", 1))
    name = f"mine-{uuid.uuid4().hex[:6]}"
    for http in (http_a, http_b):
        assert http.put(wrapper.api(f"actions/{name}"), json={"exec": {"kind": "python:3", "code": ECHO}}).ok
        assert http.post(wrapper.api(f"actions/{name}"), params={"blocking": "true"}).json()["response"]["success"]
    assert [a["name"] for a in upstream_actions(upstream, "tenant-b") if a["name"].startswith(name)]
    assert [a["name"] for a in upstream_actions(upstream, "guest") if a["name"].startswith(name)]
    for package in ("owx-guest", "owx-tenant-b"):  # private: no other upstream namespace can bind them
        assert upstream.session().get(upstream.api(f"packages/{package}")).json()["publish"] is False


def test_upstream_refusing_the_key_is_a_clear_configuration_error(workdir: Path, upstream: GatewayProcess) -> None:
    wrong = start_gateway_process(workdir / "wrong-key", args=["--upstream", upstream.url, "--upstream-auth",
                                                                f"{uuid.uuid4()}:not-the-key", "--no-extensions"])
    try:
        http = wrong.session()
        assert http.put(wrong.api("actions/x"), json={"exec": {"kind": "python:3", "code": ECHO}}).ok
        answer = http.post(wrong.api("actions/x"), params={"blocking": "true"})
        assert answer.status_code == 502
        error = answer.json()["response"]["result"]["error"]
        assert upstream.url in error and "--upstream-auth" in error
    finally:
        wrong.stop()


def test_an_unreachable_upstream_is_503_and_recorded(workdir: Path) -> None:
    """After ``retry_s`` of sending it again: an upstream away for longer fails the activation."""
    gone = start_gateway_process(workdir / "gone", args=["--upstream", "http://127.0.0.1:9", "--upstream-auth",
                                                          f"{uuid.uuid4()}:any-key", "--no-extensions"],
                                 env={"OWX_UPSTREAM__RETRY_S": "1.5"})
    try:
        http = gone.session()
        assert http.put(gone.api("actions/x"), json={"exec": {"kind": "python:3", "code": ECHO}}).ok
        answer = http.post(gone.api("actions/x"), params={"blocking": "true"})
        assert answer.status_code == 503
        assert "unreachable" in answer.json()["response"]["result"]["error"]
        stored = http.get(gone.api(f"activations/{answer.json()['activationId']}"))
        assert stored.status_code == 200 and stored.json()["response"]["status"] == "whisk internal error"
        assert stored.json()["duration"] >= 1500, stored.json()  # the time it was sent again
    finally:
        gone.stop()


def test_an_https_upstream_with_its_own_certificate_needs_upstream_insecure(workdir: Path,
                                                                            upstream: GatewayProcess) -> None:
    assert upstream.tls_url is not None  # the stand-in serves HTTPS with a certificate of its own CA
    for name, extra in (("insecure", ["--upstream-insecure"]), ("verifying", [])):
        front = start_gateway_process(workdir / f"tls-{name}", args=["--upstream", upstream.tls_url, "--upstream-auth",
                                                                     upstream.auth, "--no-extensions", *extra])
        try:
            http = front.session()
            assert http.put(front.api("actions/x"), json={"exec": {"kind": "python:3", "code": ECHO}}).ok
            answer = http.post(front.api("actions/x"), params={"blocking": "true"}, json={"n": 3})
            if extra:  # the second invoke runs from the gateway's event loop, on its own TLS connection
                assert answer.status_code == 200, answer.text
                assert answer.json()["response"]["result"] == {"got": {"n": 3}}
                again = http.post(front.api("actions/x"), params={"blocking": "true", "result": "true"}, json={"n": 4})
                assert again.status_code == 200 and again.json() == {"got": {"n": 4}}, again.text
            else:  # an unknown certificate is refused, with the reason in the record
                assert answer.status_code == 503
                assert "CERTIFICATE_VERIFY_FAILED" in answer.json()["response"]["result"]["error"]
        finally:
            front.stop()


def test_concurrent_first_deploys_of_a_tenant_share_its_package(upstream: GatewayProcess) -> None:
    """A tenant's first activations deploy at once (an invoke beside a keep-warm): every create of its
    package must succeed, whichever of them the upstream took first (the others it answers 409)."""
    client = UpstreamClient(UpstreamSettings(url=upstream.url, auth=upstream.auth))
    try:
        for _ in range(5):
            package = f"owx-race-{uuid.uuid4().hex[:8]}"
            with ThreadPoolExecutor(8) as pool:
                for created in [pool.submit(client.put_package, package) for _ in range(8)]:
                    created.result()
            assert client.call("GET", f"/packages/{package}").status == 200
    finally:
        client.close()


def test_concurrent_first_uses_of_a_revision_deploy_it_once(upstream: GatewayProcess) -> None:
    """Keep-warms and invokes of a new revision at once deploy it once: a second PUT would be an update
    upstream (a new version, the action's warm containers dropped)."""
    settings = UpstreamSettings(url=upstream.url, auth=upstream.auth)
    platform = OpenWhiskPlatform(settings)
    try:
        spec = ActionSpec(key=f"guest/race-{uuid.uuid4().hex[:8]}@1", kind="python:3", code=ECHO)
        with ThreadPoolExecutor(8) as pool:
            for warmed in [pool.submit(platform.keep_warm, spec) for _ in range(8)]:
                warmed.result()
        target = upstream_name(settings.prefix, spec)
        deployed = requests.get(upstream.api(f"actions/{target.path}"), auth=tuple(upstream.auth.split(":", 1)),
                                timeout=10)
        assert deployed.json()["version"] == "0.0.1", deployed.text[:300]  # created once, never updated
    finally:
        platform.close()


def test_credentials_in_the_upstream_url_are_named_nowhere() -> None:
    """A user and password in the upstream's URL are not owx's key (that is ``auth``): they are never
    sent, and the errors that name the upstream, which reach tenants' records, leave them out."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # nothing listens there
    client = UpstreamClient(UpstreamSettings(url=f"http://owx:hunter2@127.0.0.1:{port}", auth=UPSTREAM_AUTH))
    try:
        with pytest.raises(PlatformError) as refused:
            client.put_package("owx-guest")
        assert f"http://127.0.0.1:{port}" in str(refused.value) and "hunter2" not in str(refused.value)
    finally:
        client.close()


def _upstream_gets(upstream: GatewayProcess) -> int:
    """GET requests of its API the upstream has answered so far (its /metrics; these asks not counted)."""
    text = requests.get(f"{upstream.url}/metrics", timeout=10).text
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("owx_http_request_duration_seconds_count{") and 'method="GET"' in line
                   and "metrics" not in line))


def test_a_burst_of_updates_cleans_an_actions_old_deployments_once(upstream: GatewayProcess) -> None:
    """Each update of an action deletes its old upstream deployments, which costs a listing of the
    tenant's package: a burst of 100 updates made a queue of 100 listings (found by a probe), in front
    of every tenant's keep-warms. Cleanups not yet begun are one."""
    settings = UpstreamSettings(url=upstream.url, auth=upstream.auth)
    platform = OpenWhiskPlatform(settings)
    try:
        spec = ActionSpec(key=f"guest/burst-{uuid.uuid4().hex[:8]}@1", kind="python:3", code=ECHO)
        platform.keep_warm(spec)  # deployed once
        before = _upstream_gets(upstream)
        for _ in range(100):
            platform.forget(spec.key.rpartition("@")[0])
        seen = [before - 1, before]
        while seen[-1] != seen[-2] and len(seen) < 60:  # until a second passes without one
            time.sleep(1.0)
            seen.append(_upstream_gets(upstream))
        assert seen[-1] - before <= 3, seen
    finally:
        platform.close()


def test_an_activation_id_that_is_not_one_is_the_upstreams_fault() -> None:
    """An upstream answering 202 with an id that is not 32 hex digits (here a path) fails the
    activation as a 502 naming it, and owx sends no request with it in the URL (found by a probe:
    103 polls of GET /activations/../../namespaces/..., with owx's key). A hostile upstream cannot be
    made of the stand-in, so this one is a small HTTP server of the test's."""
    asked: list[str] = []

    class Hostile(http.server.BaseHTTPRequestHandler):
        def _answer(self, status: int, body: dict) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            asked.append(f"{self.command} {self.path}")
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_PUT(self) -> None:  # noqa: N802 - http.server's name
            self._answer(200, {})

        def do_POST(self) -> None:  # noqa: N802
            self._answer(202, {"activationId": "../../namespaces/_/actions/owx-guest%3Fx"})

        def do_GET(self) -> None:  # noqa: N802
            self._answer(404, {"error": "not found"})

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    platform = OpenWhiskPlatform(UpstreamSettings(url=f"http://127.0.0.1:{server.server_port}", auth=UPSTREAM_AUTH))
    try:
        spec = ActionSpec(key="guest/victim@1", kind="python:3", code=ECHO)
        request = RunRequest(value={}, namespace="guest", action_name="/guest/victim", activation_id="a" * 32,
                             transaction_id="t" * 32)
        with pytest.raises(PlatformError) as failed:
            platform.run(spec, request)
        assert failed.value.status == 502 and "not one" in str(failed.value)
        assert not [line for line in asked if line.startswith("GET")], asked
    finally:
        platform.close()
        server.shutdown()
        server.server_close()
