"""A tenant with an upstream account of its own (``--upstream-account NS=UUID:KEY`` at start, or
``owx admin account set`` while owx runs) is deployed and run in that upstream namespace, so when the
upstream throttles it, nobody else waits. Without accounts (the control) every tenant shares owx's key,
and one tenant's burst makes the others wait for it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from owx.bench.gateway_process import GatewayProcess, start_gateway_process
from tests.fixtures.polling import wait_for
from tests.upstream.conftest import (
    ECHO,
    UPSTREAM_AUTH,
    UPSTREAM_CONCURRENCY,
    admin,
    admin_create,
    record_of,
    slow_burst,
)

BURST = 3 * UPSTREAM_CONCURRENCY  # the first tenant's slow invokes: the upstream refuses all but two at a time
UNHINDERED_S = 0.5  # a warm invoke that waits for no one is answered well within this (it takes milliseconds)


@dataclass
class Front:
    """An owx in front of the narrow upstream, and the key of its tenant ``alice`` (the default
    namespace is the other tenant)."""

    gateway: GatewayProcess
    alice: str


@pytest.fixture(scope="module")
def alice_upstream(narrow_upstream: GatewayProcess) -> str:
    """The key of alice's own namespace on the upstream."""
    return admin_create(narrow_upstream.data_dir, "alice-upstream")


def _front(workdir: Path, upstream: GatewayProcess, name: str, args: list[str]) -> Iterator[Front]:
    gateway = start_gateway_process(workdir / name, args=["--upstream", upstream.url, "--upstream-auth", UPSTREAM_AUTH,
                                                          "--no-extensions", *args])
    yield Front(gateway, admin_create(gateway.data_dir, "alice"))
    gateway.stop()


@pytest.fixture(scope="module")
def with_accounts(workdir: Path, narrow_upstream: GatewayProcess, alice_upstream: str) -> Iterator[Front]:
    yield from _front(workdir, narrow_upstream, "front-accounts", ["--upstream-account", f"alice={alice_upstream}"])


@pytest.fixture(scope="module")
def shared_key(workdir: Path, narrow_upstream: GatewayProcess) -> Iterator[Front]:
    yield from _front(workdir, narrow_upstream, "front-shared", [])


def _others_wait_s(front: Front) -> tuple[float, list[dict]]:
    """Alice bursts slow invokes; meanwhile the other tenant invokes a warm action, blocking. How long
    that invoke took (the client's round trip), and alice's records."""
    gateway = front.gateway
    http = gateway.session()
    echo = f"echo-{uuid.uuid4().hex[:6]}"
    assert http.put(gateway.api(f"actions/{echo}"), json={"exec": {"kind": "python:3", "code": ECHO}}).ok
    warmed = http.post(gateway.api(f"actions/{echo}"), params={"blocking": "true"})
    assert warmed.status_code == 200, warmed.text  # deployed and warm upstream
    ids = slow_burst(gateway, BURST, front.alice)
    time.sleep(0.3)  # alice's first activations hold the upstream's slots of whatever key they run with
    started = time.monotonic()
    answer = http.post(gateway.api(f"actions/{echo}"), params={"blocking": "true", "result": "true"}, json={"n": 7})
    took = time.monotonic() - started
    assert answer.status_code == 200 and answer.json() == {"n": 7}, answer.text
    return took, [record_of(gateway, activation_id, front.alice) for activation_id in ids]


def _upstream_actions(upstream: GatewayProcess, auth: str, package: str) -> list[str]:
    answer = upstream.session(auth).get(upstream.api(f"actions/{package}/"))
    return [a["name"] for a in answer.json()] if answer.status_code == 200 else []


def test_a_tenant_with_its_own_account_is_throttled_alone(with_accounts: Front, narrow_upstream: GatewayProcess,
                                                          alice_upstream: str) -> None:
    took, records = _others_wait_s(with_accounts)
    assert took < UNHINDERED_S, f"the other tenant waited {took:.2f} s for alice's burst"
    # alice's own activations all ran, waiting their turn in her namespace
    assert [r["response"]["status"] for r in records] == ["success"] * BURST
    waits = sorted(next(a["value"] for a in r["annotations"] if a["key"] == "waitTime") for r in records)
    assert waits[-1] >= 1500, waits
    # her deployments are in her upstream namespace, none in the one owx's key shares
    assert any(n.startswith("slow-") for n in _upstream_actions(narrow_upstream, alice_upstream, "owx-alice"))
    assert not _upstream_actions(narrow_upstream, UPSTREAM_AUTH, "owx-alice")


def test_without_accounts_one_tenants_burst_makes_the_others_wait(shared_key: Front) -> None:
    took, records = _others_wait_s(shared_key)
    assert took >= UNHINDERED_S, f"the other tenant waited only {took:.2f} s"
    assert [r["response"]["status"] for r in records] == ["success"] * BURST


def test_deleting_an_action_deletes_its_deployment_in_the_tenants_account(with_accounts: Front,
                                                                           narrow_upstream: GatewayProcess,
                                                                           alice_upstream: str) -> None:
    gateway, alice = with_accounts.gateway, with_accounts.alice
    name = f"gone-{uuid.uuid4().hex[:6]}"
    http = gateway.session(alice)
    assert http.put(gateway.api(f"actions/{name}"), json={"exec": {"kind": "python:3", "code": ECHO}}).ok
    assert http.post(gateway.api(f"actions/{name}"), params={"blocking": "true"}).status_code == 200

    def deployed() -> list[str]:
        return [n for n in _upstream_actions(narrow_upstream, alice_upstream, "owx-alice") if n.startswith(f"{name}@")]

    assert deployed()
    assert gateway.session(alice).delete(gateway.api(f"actions/{name}")).ok
    wait_for(lambda: not deployed(), what="alice's upstream deployment to be deleted")


def test_an_account_key_the_upstream_refuses_fails_that_tenant_only(workdir: Path,
                                                                     narrow_upstream: GatewayProcess) -> None:
    wrong = f"{uuid.uuid4()}:not-a-key-upstream"
    for front in _front(workdir, narrow_upstream, "front-wrong-key", ["--upstream-account", f"alice={wrong}"]):
        gateway = front.gateway
        for auth in (front.alice, gateway.auth):
            assert gateway.session(auth).put(gateway.api("actions/echo"),
                                             json={"exec": {"kind": "python:3", "code": ECHO}}).ok
        refused = gateway.session(front.alice).post(gateway.api("actions/echo"), params={"blocking": "true"})
        assert refused.status_code == 502, refused.text
        error = refused.json()["response"]["result"]["error"]
        assert wrong.split(":")[0] in error and "not-a-key" not in error  # names the key, never its secret
        assert gateway.session().post(gateway.api("actions/echo"), params={"blocking": "true"}).status_code == 200


def test_an_account_set_while_owx_runs_applies_at_once_and_after_a_restart(workdir: Path,
                                                                           narrow_upstream: GatewayProcess,
                                                                           alice_upstream: str) -> None:
    key_uuid, secret = alice_upstream.split(":")
    for front in _front(workdir, narrow_upstream, "front-admin", []):
        gateway = front.gateway
        assert admin(gateway.data_dir, "account", "set", "alice", alice_upstream).returncode == 0
        listed = admin(gateway.data_dir, "account", "list").stdout
        assert listed == f"alice\t{key_uuid}\n" and secret not in listed
        took, _ = _others_wait_s(front)
        assert took < UNHINDERED_S, f"the other tenant waited {took:.2f} s for alice's burst"
        gateway.stop()
        gateway.restart()
        took, _ = _others_wait_s(front)
        assert took < UNHINDERED_S, f"after a restart the other tenant waited {took:.2f} s for alice's burst"
        assert admin(gateway.data_dir, "account", "unset", "alice").returncode == 0
        name = f"shared-{uuid.uuid4().hex[:6]}"
        http = gateway.session(front.alice)
        assert http.put(gateway.api(f"actions/{name}"), json={"exec": {"kind": "python:3", "code": ECHO}}).ok
        assert http.post(gateway.api(f"actions/{name}"), params={"blocking": "true"}).status_code == 200
        assert any(n.startswith(f"{name}@") for n in _upstream_actions(narrow_upstream, UPSTREAM_AUTH, "owx-alice"))


def test_account_commands_refuse_what_they_cannot_do(with_accounts: Front, alice_upstream: str) -> None:
    data_dir = with_accounts.gateway.data_dir
    for args, says in ((("set", "bob", "not-a-key"), "UUID:KEY"),
                       (("set", "_system", alice_upstream), "not a valid"),
                       (("set", "alice", alice_upstream), "settings"),  # given at start: changed there only
                       (("unset", "bob"), "no upstream account")):
        refused = admin(data_dir, "account", *args)
        assert refused.returncode == 2 and says in refused.stderr, (args, refused.stderr)
    assert admin(data_dir, "account", "list").stdout == f"alice\t{alice_upstream.split(':')[0]}\n"


def test_owx_on_its_own_containers_refuses_accounts_and_a_stopped_one_keeps_them_for_its_start(
        workdir: Path, alice_upstream: str) -> None:
    embedded = start_gateway_process(workdir / "embedded")
    try:
        refused = admin(embedded.data_dir, "account", "set", "alice", alice_upstream)
        assert refused.returncode == 2 and "only in front of an OpenWhisk" in refused.stderr, refused.stderr
    finally:
        embedded.stop()
    stored = admin(embedded.data_dir, "account", "set", "alice", stdin=f"{alice_upstream}\n")  # out of ps' sight
    assert stored.returncode == 0, stored.stderr  # not running: the store only
    assert admin(embedded.data_dir, "account", "list").stdout == f"alice\t{alice_upstream.split(':')[0]}\n"


def test_a_shared_action_runs_in_the_callers_account_and_is_deleted_there_too(with_accounts: Front,
                                                                               narrow_upstream: GatewayProcess,
                                                                               alice_upstream: str) -> None:
    gateway = with_accounts.gateway
    owner = gateway.session()
    package = f"pub-{uuid.uuid4().hex[:6]}"
    assert owner.put(gateway.api(f"packages/{package}"), json={"publish": True}).ok
    assert owner.put(gateway.api(f"actions/{package}/echo"), json={"exec": {"kind": "python:3", "code": ECHO}}).ok
    owner_namespace = owner.get(f"{gateway.url}/api/v1/namespaces").json()[0]
    ran = gateway.session(with_accounts.alice).post(
        f"{gateway.url}/api/v1/namespaces/{owner_namespace}/actions/{package}/echo",
        params={"blocking": "true", "result": "true"}, json={"n": 3})
    assert ran.status_code == 200 and ran.json() == {"n": 3}, ran.text

    def in_alices_account() -> list[str]:  # where alice's call ran: OpenWhisk charges the caller
        return [n for n in _upstream_actions(narrow_upstream, alice_upstream, f"owx-{owner_namespace}")
                if n.startswith(f"{package}.echo@")]

    assert in_alices_account()
    assert owner.delete(gateway.api(f"actions/{package}/echo")).ok
    wait_for(lambda: not in_alices_account(), what="the deployment in alice's account to be deleted")


def test_an_account_set_on_one_gateway_applies_on_the_others_sharing_its_couchdb(
        workdir: Path, narrow_upstream: GatewayProcess, alice_upstream: str, couchdb_url: str) -> None:
    shared = {"OWX_GATEWAY__STORE": "couchdb", "OWX_GATEWAY__COUCHDB_URL": couchdb_url,
              "OWX_GATEWAY__COUCHDB_PREFIX": f"owx_accounts_{uuid.uuid4().hex[:6]}_"}
    args = ["--upstream", narrow_upstream.url, "--upstream-auth", UPSTREAM_AUTH, "--no-extensions"]
    first = start_gateway_process(workdir / "couch-first", args=args, env=shared)
    second = start_gateway_process(workdir / "couch-second", args=args, env=shared, auth=first.auth)
    try:
        alice = admin_create(first.data_dir, "alice")

        def runs_with(upstream_auth: str) -> bool:
            """Whether a new action alice invokes through the second gateway is deployed with ``upstream_auth``."""
            name = f"where-{uuid.uuid4().hex[:6]}"
            http = second.session(alice)
            assert http.put(second.api(f"actions/{name}"), json={"exec": {"kind": "python:3", "code": ECHO}}).ok
            assert http.post(second.api(f"actions/{name}"), params={"blocking": "true"}).status_code == 200
            return any(n.startswith(f"{name}@") for n in _upstream_actions(narrow_upstream, upstream_auth, "owx-alice"))

        assert runs_with(UPSTREAM_AUTH)
        assert admin(first.data_dir, "account", "set", "alice", alice_upstream).returncode == 0  # the first's socket
        wait_for(lambda: runs_with(alice_upstream), timeout=20, interval=0.5,
                 what="the second gateway to run alice in her account")
        assert admin(first.data_dir, "account", "unset", "alice").returncode == 0
        wait_for(lambda: runs_with(UPSTREAM_AUTH), timeout=20, interval=0.5,
                 what="the second gateway to run alice with owx's key again")
    finally:
        second.stop()
        first.stop()
