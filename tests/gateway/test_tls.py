"""HTTPS: ``owx up`` serves it with a certificate it makes (and a CA clients can verify it with)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import requests

from owx.bench.gateway_process import GatewayProcess, start_gateway_process
from owx.common.eventloop import EventLoopThread
from owx.gateway.http.https_listener import HttpsListener
from owx.gateway.http.messages import Request, Response, json_response
from owx.gateway.http.protocol import Connections, HttpConnection, Limits
from owx.gateway.sdk import Client
from owx.gateway.tls import self_signed

NPM_DIR = Path(__file__).resolve().parents[1] / "npm"
FLOW = Path(__file__).with_name("npm_client_flow.js")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory) -> GatewayProcess:
    running = start_gateway_process(tmp_path_factory.mktemp("tls"))
    yield running
    running.stop()


def npm_flow(gateway: GatewayProcess, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "OW_APIHOST": gateway.tls_url, "OW_AUTH": gateway.auth,
               "NODE_PATH": str(NPM_DIR / "node_modules"), **env}
    return subprocess.run(["node", str(FLOW), f"tls-{uuid.uuid4().hex[:8]}"], capture_output=True, text=True,
                          env=environ, timeout=180)


def test_the_npm_client_works_over_https_with_ignore_certs_and_with_the_ca(gateway: GatewayProcess) -> None:
    assert gateway.tls_url and gateway.tls_url.startswith("https://")
    insecure = npm_flow(gateway, OW_IGNORE_CERTS="true")
    assert insecure.returncode == 0, insecure.stderr
    assert json.loads(insecure.stdout)["result"] == {"hello": "npm"}
    verified = npm_flow(gateway, NODE_EXTRA_CA_CERTS=str(gateway.data_dir / "tls" / "ca.pem"))
    assert verified.returncode == 0, verified.stderr
    refused = npm_flow(gateway)  # neither: the self-signed certificate must be refused
    assert refused.returncode != 0 and "certificate" in refused.stderr.lower()


def test_the_sdk_verifies_with_the_ca_it_is_given(gateway: GatewayProcess) -> None:
    ca = str(gateway.data_dir / "tls" / "ca.pem")
    client = Client(apihost=gateway.tls_url, auth=gateway.auth, ca=ca)
    assert client.put_action("tls-sdk", "def main(a):\n    return {'ok': True}\n")["name"] == "tls-sdk"
    with pytest.raises(requests.exceptions.SSLError):
        Client(apihost=gateway.tls_url, auth=gateway.auth).list_actions()  # the system's CAs do not know it
    insecure = Client(apihost=gateway.tls_url, auth=gateway.auth, insecure=True)
    assert "tls-sdk" in [a["name"] for a in insecure.list_actions()]


def test_disdel_plans_against_the_https_apihost_owx_up_wrote_into_wskprops(gateway: GatewayProcess,
                                                                          tmp_path: Path) -> None:
    """The README's path: ``owx up`` wrote an https APIHOST and its CA; DiSDeL reads the platform's
    limits from it (and does not fall back to the system's CAs, which refuse the certificate)."""
    ca = gateway.data_dir / "tls" / "ca.pem"
    (tmp_path / ".wskprops").write_text(f"APIHOST={gateway.tls_url}\nAUTH={gateway.auth}\nOWX_CACERT={ca}\n")
    read_limits = "from owx.disdel.gateway import Gateway; print(Gateway.connect().limits(2048).memory_max_mb)"
    env = {key: value for key, value in os.environ.items() if not key.startswith("__OW_")}
    done = subprocess.run([sys.executable, "-c", read_limits], capture_output=True, text=True, timeout=60,
                          env={**env, "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout) == requests.get(f"{gateway.url}/api/v1").json()["limits"]["max_action_memory"] >> 20


def test_http_and_https_serve_the_same_gateway(gateway: GatewayProcess) -> None:
    ca = str(gateway.data_dir / "tls" / "ca.pem")
    plain = requests.get(f"{gateway.url}/api/v1/namespaces", auth=tuple(gateway.auth.split(":")))
    secure = requests.get(f"{gateway.tls_url}/api/v1/namespaces", auth=tuple(gateway.auth.split(":")), verify=ca)
    assert plain.json() == secure.json() == ["guest"]
    assert oct((gateway.data_dir / "tls" / "server-key.pem").stat().st_mode & 0o777) == "0o600"


def test_plain_http_to_the_https_port_gets_a_400_naming_the_https_url(gateway: GatewayProcess) -> None:
    """A client given an http:// URL with the HTTPS port (a wskprops typo) is told what to use, in
    OpenWhisk's error body, instead of a connection closed without a word; TLS clients on the same
    port and a client that sends nothing are served as before."""
    port = gateway.tls_url.rsplit(":", 1)[1]
    plain = requests.get(f"http://127.0.0.1:{port}/api/v1/namespaces", auth=tuple(gateway.auth.split(":")),
                         timeout=10)
    assert plain.status_code == 400, plain.text
    assert plain.json()["error"] == f"The plain HTTP request was sent to the HTTPS port: use https://127.0.0.1:{port}."
    assert plain.headers["X-Request-ID"] == plain.json()["code"]
    with socket.create_connection(("127.0.0.1", int(port)), timeout=10) as silent:  # connects, sends nothing
        ca = str(gateway.data_dir / "tls" / "ca.pem")
        secure = requests.get(f"{gateway.tls_url}/api/v1/namespaces", auth=tuple(gateway.auth.split(":")),
                              verify=ca, timeout=10)
        assert secure.json() == ["guest"]
        silent.shutdown(socket.SHUT_WR)
        assert silent.recv(1) == b""  # closed once it closes its side, nothing written


def test_connections_that_send_nothing_to_the_https_port_hold_no_more_than_its_pending_bound(tmp_path) -> None:
    """Before its first byte and handshake a connection is counted by no connection limit: clients
    that connect and send nothing took a descriptor each for a minute, as many as they opened, until
    the gateway had none left for anyone. At most ``max_pending`` wait now, the oldest closed for a
    new one, and a client that speaks is served."""
    tls = self_signed(tmp_path, "127.0.0.1")
    loop = EventLoopThread("test-https-listener")
    listening = socket.create_server(("127.0.0.1", 0))

    async def start() -> HttpsListener:
        connections = Connections(Limits())
        return HttpsListener(listening, tls.server_context(),
                             lambda: HttpConnection(_ok, Limits(), "https", connections),
                             lambda: HttpConnection(_ok, Limits(), "http", connections), 64, max_pending=8)

    listener = loop.submit(start()).result(10)
    port = listening.getsockname()[1]
    silent = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(12)]
    try:
        for oldest in silent[:4]:  # closed for the newer ones
            assert oldest.recv(1) == b""
        for newer in silent[4:]:  # still waiting for their first byte
            newer.settimeout(0.2)
            with pytest.raises(TimeoutError):
                newer.recv(1)
        answer = requests.get(f"https://127.0.0.1:{port}/", verify=str(tls.ca), timeout=10)
        assert answer.status_code == 200 and answer.json() == {"ok": True}
    finally:
        for sock in silent:
            sock.close()
        loop.call(listener.close)
        loop.close()


async def _ok(_request: Request) -> Response:
    return json_response({"ok": True})


def test_a_second_owx_up_on_the_data_dir_is_refused_without_touching_the_running_ones_certificate(
        gateway: GatewayProcess) -> None:
    """Another host name would make a new certificate: a refused instance must leave the files as the
    running one serves them (clients verify with its CA)."""
    tls = gateway.data_dir / "tls"
    before = {path.name: path.read_bytes() for path in tls.glob("*.pem")}
    second = subprocess.run([sys.executable, "-m", "owx.cli", "up", "--host", "127.0.0.3", "--port", "0",
                             "--data-dir", str(gateway.data_dir)], capture_output=True, text=True, timeout=60,
                            check=False,
                            env={**os.environ, "HOME": str(gateway.data_dir / "home"), "OWX_GATEWAY__TLS_PORT": "0"})
    assert second.returncode != 0 and "in use by another owx store" in second.stderr
    assert {path.name: path.read_bytes() for path in tls.glob("*.pem")} == before
    assert requests.get(f"{gateway.tls_url}/api/v1", verify=str(tls / "ca.pem"), timeout=10).ok
