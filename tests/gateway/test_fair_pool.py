"""The Flask views' thread pool serves namespaces in turn: one tenant's flood does not queue the others."""

from __future__ import annotations

import base64
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from owx.gateway import identity
from owx.gateway import server as server_module
from owx.gateway.admin.users import Users
from owx.gateway.http.fair_pool import SHARED, FairPool
from owx.gateway.http.messages import Request
from owx.gateway.key_signing import KeySigner
from owx.gateway.turns import (
    REFUSED_TURN, SIGNED_SHARE, SIGNED_TURN, UNKNOWN_TURN, WEB_TURN, request_turn, share_of, unknown_turn,
)
from owx.bench.http_client import from_address
from tests.gateway.conftest import start_gateway
from tests.gateway.test_api_invoke import deploy

WORK_S = 0.05
FLOOD = 40  # pieces of work the flooding tenant queues: 1 s of work on two threads


def _wait_of_a_late_request(submit_flood, submit_other) -> float:
    """Seconds another tenant's request waited for its answer behind a flood queued just before it."""
    for _ in range(FLOOD):
        submit_flood(time.sleep, WORK_S)
    started = time.monotonic()
    submit_other(lambda: None).result(10)
    return time.monotonic() - started


def test_another_tenants_request_waits_for_at_most_a_piece_of_work_per_thread() -> None:
    pool = FairPool(2)
    try:
        waited = _wait_of_a_late_request(pool.for_tenant("flood").submit, pool.for_tenant("other").submit)
        assert waited < 3 * WORK_S
        assert pool.queued().get("flood", 0) > FLOOD // 2  # the flood still waits: it was not served first
    finally:
        pool.shutdown(cancel_futures=True)


def test_a_first_come_pool_makes_the_same_request_wait_for_the_whole_flood() -> None:
    """The control: the same workload on a plain thread pool (what the gateway had)."""
    pool = ThreadPoolExecutor(2)
    try:
        waited = _wait_of_a_late_request(pool.submit, pool.submit)
        assert waited > FLOOD * WORK_S / 2 * 0.8
    finally:
        pool.shutdown(cancel_futures=True)


def test_a_tenant_alone_gets_every_thread_and_results_and_errors_come_back() -> None:
    pool = FairPool(4)
    try:
        inside = threading.Barrier(4, timeout=5)
        futures = [pool.submit_as("alone", inside.wait) for _ in range(4)]  # all four at once, or the barrier breaks
        assert sorted(f.result(5) for f in futures) == [0, 1, 2, 3]
        assert pool.submit(lambda: 7).result(5) == 7
        with pytest.raises(ZeroDivisionError):
            pool.submit_as("alone", lambda: 1 / 0).result(5)
    finally:
        pool.shutdown()


def _served_while_a_tenant_holds_threads(pool: FairPool, holders: list[str]) -> bool:
    """Whether another tenant's work ran while a piece of work of each of ``holders`` held a thread
    or waited for one; afterwards every piece of work has finished."""
    release = threading.Event()
    holding = [pool.submit_as(tenant, release.wait, 10) for tenant in holders]
    time.sleep(0.2)  # the holders have taken what threads they may
    other = pool.submit_as("other", lambda: "served")
    try:
        return other.result(0.5) == "served"
    except TimeoutError:
        return False
    finally:
        release.set()
        assert all(future.result(10) for future in holding) and other.result(10) == "served"


def test_a_tenant_holds_at_most_its_share_of_threads_so_another_is_served_at_once() -> None:
    pool = FairPool(4, tenant_threads=2, share_of=lambda tenant: tenant.removeprefix("web:"))
    try:
        assert _served_while_a_tenant_holds_threads(pool, ["a"] * 6)
        assert _served_while_a_tenant_holds_threads(pool, ["a", "web:a"] * 3)  # one share for both turns
        release = threading.Event()
        holding = [pool.submit_as("a", release.wait, 10) for _ in range(6)]
        time.sleep(0.2)
        assert pool.queued() == {"a": 4}  # two run; four wait for a's own threads to come free
        release.set()
        assert all(future.result(10) for future in holding)
    finally:
        pool.shutdown()


def test_work_is_taken_in_turn_order_skipping_shares_at_their_cap_until_they_are_below_it() -> None:
    """Tenants are served in the order they took their turns; the tenants of a share at its cap are
    passed over (their turns kept), and served in their order once a piece of the share's work ends."""
    pool = FairPool(2, tenant_threads=1, share_of=lambda tenant: tenant[0])  # "a1", "a2": share "a"
    release_a, release_b = threading.Event(), threading.Event()
    ran: list[str] = []
    try:
        holding = [pool.submit_as("a0", release_a.wait, 10), pool.submit_as("b0", release_b.wait, 10)]
        time.sleep(0.2)  # both threads held: shares a and b at their cap
        queued = [pool.submit_as(tenant, ran.append, tenant) for tenant in ("a1", "a2", "c1", "a1", "b1", "c2", "d1")]
        time.sleep(0.1)
        assert ran == []
        release_b.set()  # b0 ends: its thread passes over a1 and a2 (a at its cap) and serves the rest in turn
        time.sleep(0.3)
        assert ran == ["c1", "b1", "c2", "d1"]
        release_a.set()  # a0 ends: a's tenants in turn, a1's second piece after a2's (served, a tenant goes last)
        for future in (*holding, *queued):
            future.result(10)
        assert ran == ["c1", "b1", "c2", "d1", "a1", "a2", "a1"]
    finally:
        pool.shutdown(cancel_futures=True)


def test_without_a_share_a_tenant_holding_every_thread_keeps_another_waiting() -> None:
    """The control: the same pool, no cap on a tenant's threads."""
    pool = FairPool(4)
    try:
        assert not _served_while_a_tenant_holds_threads(pool, ["a"] * 6)
    finally:
        pool.shutdown()


@pytest.mark.parametrize("share, served_at_once", [(0.5, True), (1.0, False)])
def test_the_gateway_keeps_one_namespaces_slow_views_to_its_share_of_threads(tmp_path, share, served_at_once) -> None:
    """Tenant A's blocking invokes and web requests each hold a thread for 3 s (waits held, as a plain
    WSGI server holds them); tenant B's listing is answered at once only when A may hold half the
    threads, its API and web requests together."""
    server, gateway = start_gateway(tmp_path, gateway={"http_threads": 4, "defer_waits": False,
                                                       "tenant_thread_share": share})
    try:
        http = gateway.session()
        name = deploy(http, gateway, annotations=[{"key": "web-export", "value": True}])
        web = f"{gateway.url}/api/v1/web/{gateway.namespace}/default/{name}.json"
        assert requests.post(web, json={}, timeout=60).status_code == 200  # its owner cached: A's web turn
        other = gateway.tenant("share-other").session()
        assert other.get(gateway.api("actions")).status_code == 200  # B's key is cached: B has a turn of its own
        with ThreadPoolExecutor(6) as clients:
            slow = [clients.submit(requests.post, web, json={"sleep": 3}, timeout=60) for _ in range(3)]
            slow += [clients.submit(http.post, gateway.api(f"actions/{name}"), params={"blocking": "true"},
                                    json={"sleep": 3}, timeout=60) for _ in range(3)]
            time.sleep(1)  # A's requests hold what threads they may
            started = time.monotonic()
            assert other.get(gateway.api("actions"), timeout=60).status_code == 200
            waited = time.monotonic() - started
            assert all(answer.result().status_code == 200 for answer in slow)
        assert (waited < 1) == served_at_once, waited
    finally:
        server.stop()


def test_shutdown_waits_for_a_capped_tenants_queued_work_and_ends_every_thread() -> None:
    pool = FairPool(4, tenant_threads=1)
    work = [pool.submit_as("a", time.sleep, 0.1) for _ in range(3)]  # one runs, two wait; three threads idle
    time.sleep(0.05)
    stopping = threading.Thread(target=pool.shutdown)
    stopping.start()
    stopping.join(5)
    assert not stopping.is_alive() and all(future.done() for future in work)


def test_shutdown_cancels_queued_work_and_refuses_more() -> None:
    pool = FairPool(1)
    started, release = threading.Event(), threading.Event()
    running = pool.submit(lambda: started.set() or release.wait(5))
    assert started.wait(5)
    queued = pool.submit(lambda: None)
    pool.shutdown(wait=False, cancel_futures=True)
    assert queued.cancelled()
    release.set()
    assert running.result(5) is True
    with pytest.raises(RuntimeError):
        pool.submit(lambda: None)


LOCAL_UNKNOWN = UNKNOWN_TURN + "127.0.0.1"  # the turn of callers from 127.0.0.1 the store must look up


def header(key: str) -> str:
    return "Basic " + base64.b64encode(key.encode()).decode()


def _request(authorization: str | None, path: bytes = b"/api/v1/namespaces/_/actions") -> Request:
    headers = [] if authorization is None else [(b"authorization", authorization.encode())]
    return Request("GET", path, b"", headers, b"", ("127.0.0.1", 40000), ("127.0.0.1", 0), "http", "1.1")


def test_the_gateway_queues_a_request_under_its_callers_namespace_once_its_key_is_known(gateway, http) -> None:
    other = gateway.tenant("fair-other")
    for running in (gateway, other):  # a request each: their keys are cached from now on
        assert running.session().get(running.api("actions")).status_code == 200
    auth = gateway.service.auth
    assert request_turn(auth, _request(header(gateway.auth))) == gateway.namespace
    assert request_turn(auth, _request(header(other.auth))) == other.namespace
    made_up = header(f"made-up-{uuid.uuid4().hex}:nothing")
    assert request_turn(auth, _request(made_up)) == LOCAL_UNKNOWN  # a key not seen yet: the store must say
    assert requests.get(gateway.api("actions"), headers={"Authorization": made_up}, timeout=30).status_code == 401
    assert request_turn(auth, _request(made_up)) == REFUSED_TURN  # the store said it is nobody's
    known_uuid = gateway.auth.split(":")[0]
    for refused in (header(f"{known_uuid}:wrong"), "Bearer x", None):  # one turn for all that are known to fail
        assert request_turn(auth, _request(refused)) == REFUSED_TURN


def test_a_returning_caller_waits_in_its_own_turn_after_its_key_leaves_the_cache(gateway, monkeypatch) -> None:
    """Past the cache's life a key is read from the store again (in the view), but its request waits in
    the turn of the namespace the same header proved before, not behind everyone unknown (a flood of
    made-up keys, say). A header that then fails to authenticate waits in its key's own turn (owx
    made the key), no longer in its namespace's."""
    returning, rotated = gateway.tenant("fair-returning"), gateway.tenant("fair-rotated")
    for tenant in (returning, rotated):
        session = tenant.session()
        for _ in range(2):  # the first reads the store; the second is checked against the cached key
            assert session.get(tenant.api("actions")).status_code == 200
    auth, returning_header = gateway.service.auth, header(returning.auth)
    monkeypatch.setattr(identity, "CACHE_TTL_S", 0.0)  # every cached key has expired
    assert auth.identify_cached(returning_header) is None  # the store must be asked again
    assert request_turn(auth, _request(returning_header)) == returning.namespace
    assert request_turn(auth, _request(header(f"made-up-{uuid.uuid4().hex}:nothing"))) == LOCAL_UNKNOWN
    Users(gateway.service.entities).delete("fair-returning")  # as another gateway on the same store would
    assert returning.session().get(returning.api("actions")).status_code == 401
    assert request_turn(auth, _request(returning_header)) == SIGNED_TURN + returning.auth.split(":")[0]
    auth.forget(rotated.auth.split(":")[0])  # this gateway deleted or rotated the key
    assert request_turn(auth, _request(header(rotated.auth))) == SIGNED_TURN + rotated.auth.split(":")[0]


def test_a_key_owx_made_waits_in_a_turn_of_its_own_before_it_is_known_a_key_given_to_owx_in_its_address(
        gateway) -> None:
    """The keys owx makes end in a MAC of the rest (any gateway on the store checks it without reading
    the store); a made-up or altered key has none, nor has a key given to owx (``--auth``)."""
    users, auth = Users(gateway.service.entities), gateway.service.auth
    made = users.create("fair-made")  # no request yet: not cached
    given = users.create("fair-given", auth=f"{uuid.uuid4()}:{'g' * 64}")
    assert request_turn(auth, _request(header(made.auth))) == SIGNED_TURN + made.uuid
    assert request_turn(auth, _request(header(given.auth))) == LOCAL_UNKNOWN
    altered = made.key[:-1] + ("A" if made.key[-1] != "A" else "B")
    for made_up in (f"{made.uuid}:{altered}", f"{uuid.uuid4()}:{made.key}", f"{made.uuid}:{made.key[:-1]}"):
        assert request_turn(auth, _request(header(made_up))) == LOCAL_UNKNOWN
    assert share_of(SIGNED_TURN + made.uuid) == SIGNED_SHARE not in (SHARED, share_of(LOCAL_UNKNOWN))
    rotated = users.rotate("fair-made")
    assert rotated.key != made.key and request_turn(auth, _request(header(rotated.auth))) == SIGNED_TURN + made.uuid
    assert KeySigner.of(gateway.service.entities).signed(made.uuid, rotated.key)  # another gateway on the store


def test_a_web_action_waits_in_its_namespaces_web_turn_whoever_calls_it(gateway, http) -> None:
    """Web actions come without a key, so their namespace's owner decides the turn: a public flood of
    one tenant's web actions waits behind itself only. Names that are not namespaces share one turn."""
    name = deploy(http, gateway, annotations=[{"key": "web-export", "value": True}])
    path = f"/api/v1/web/{gateway.namespace}/default/{name}.json".encode()
    auth = gateway.service.auth
    other = gateway.tenant("fair-web-other")
    other_path = f"/api/v1/web/{other.namespace}/default/anything.json".encode()
    assert request_turn(auth, _request(None, other_path)) == LOCAL_UNKNOWN  # its owner not looked up yet: no store read here
    assert requests.get(gateway.url + path.decode(), timeout=30).status_code == 200  # the owner is cached now
    turn = WEB_TURN + gateway.namespace
    for authorization in (None, header(gateway.auth), header("nobody:nothing")):
        assert request_turn(auth, _request(authorization, path)) == turn
    assert turn != request_turn(auth, _request(header(gateway.auth)))  # not the turn of the namespace's API calls
    for made_up in (b"/api/v1/web/no-such-namespace/default/x", b"/api/v1/web/%ff%fe/p/x", b"/api/v1/web/"):
        assert requests.get(gateway.url + made_up.decode("latin-1"), timeout=30).status_code in (400, 404)
        assert request_turn(auth, _request(None, made_up)) == LOCAL_UNKNOWN


def test_callers_the_store_must_look_up_take_turns_by_their_address_all_in_one_share() -> None:
    assert unknown_turn(("192.0.2.7", 1)) == UNKNOWN_TURN + "192.0.2.7"
    assert unknown_turn(("192.0.2.7", 1)) != unknown_turn(("192.0.2.8", 1))
    assert unknown_turn(("::ffff:192.0.2.7", 1)) == unknown_turn(("192.0.2.7", 2))  # IPv4-mapped: the same client
    assert unknown_turn(("2001:db8:1:2:aaaa::1", 1)) == unknown_turn(("2001:db8:1:2:ffff::9", 1))  # a /64: one host
    assert unknown_turn(("2001:db8:1:2::1", 1)) != unknown_turn(("2001:db8:1:3::1", 1))
    assert unknown_turn(None) == SHARED  # a Unix socket's caller
    assert unknown_turn(("192.0.2.7", 1), by_address=False) == SHARED  # the benchmark's control
    assert {share_of(unknown_turn((host, 1))) for host in ("192.0.2.7", "2001:db8::1")} == {SHARED}  # one cap for all
    assert share_of(WEB_TURN + "ns") == share_of("ns") == "ns"


def test_behind_a_trusted_proxy_callers_take_turns_by_the_address_it_names(tmp_path, monkeypatch) -> None:
    """A gateway behind a load balancer: a caller the store must look up waits in the turn of the
    client address the balancer's X-Forwarded-For names, so one client's flood queues only its own
    requests; a caller that is not the balancer cannot choose its turn by naming an address."""
    turns: list[str] = []

    def noted_turn(auth, request, by_address=True):  # type: ignore[no-untyped-def]
        turns.append(request_turn(auth, request, by_address))
        return turns[-1]

    monkeypatch.setattr(server_module, "request_turn", noted_turn)
    server, running = start_gateway(tmp_path, gateway={"trusted_proxies": ["127.0.0.1/32"]})
    try:
        for peer, turn in (("127.0.0.1", UNKNOWN_TURN + "198.51.100.7"), ("127.0.0.2", UNKNOWN_TURN + "127.0.0.2")):
            made_up = header(f"made-up-{uuid.uuid4().hex}:nothing")
            answer = from_address(requests.Session(), peer).get(
                running.api("actions"), headers={"Authorization": made_up, "X-Forwarded-For": "198.51.100.7"})
            assert answer.status_code == 401 and turns[-1] == turn
    finally:
        server.stop()


@pytest.mark.parametrize(("method", "path", "victims_status"), [("GET", "actions", 200),  # a Flask view
                                                              ("POST", "actions/none", 404)])  # an invoke
@pytest.mark.parametrize("victims_address", ["127.0.0.2", "127.0.0.1"])
def test_a_flood_of_made_up_keys_from_one_address_does_not_queue_a_new_tenants_first_request(
        gateway, monkeypatch, method: str, path: str, victims_status: int, victims_address: str) -> None:
    """Each made-up key must be looked up in the store (slow here: 50 ms). 160 of them from 127.0.0.1
    keep the unknown callers' threads busy for two seconds; a new tenant's first request, from another
    address or from the flood's own (its key owx made), is looked up within a round or two of its
    arrival, not after the rest of the flood. Counted from when it is sent, so a slow machine, which
    looks up fewer keys per second, does not move the bound."""
    auth, lookup, started = gateway.service.auth, gateway.service.auth._lookup, []

    def slow_lookup(uuid: str):  # type: ignore[no-untyped-def]
        started.append(uuid)
        if uuid.startswith("made-up"):
            time.sleep(0.05)
        return lookup(uuid)

    monkeypatch.setattr(auth, "_lookup", slow_lookup)
    victim = gateway.tenant(f"fair-address-victim-{method.lower()}-{victims_address}")
    victims_session = from_address(victim.session(), victims_address)
    flood = [header(f"made-up-{uuid.uuid4().hex}:nothing") for _ in range(160)]
    with ThreadPoolExecutor(len(flood)) as senders:
        refused = [senders.submit(requests.request, method, gateway.api(path), headers={"Authorization": h},
                                  timeout=30) for h in flood]
        deadline = time.monotonic() + 10
        while len(started) < 8 and time.monotonic() < deadline:  # the flood is being looked up
            time.sleep(0.01)
        sent_after = len(started)
        answer = victims_session.request(method, victim.api(path), timeout=30)
        assert answer.status_code == victims_status
        assert [f.result().status_code for f in refused] == [401] * len(flood)
    assert sent_after <= len(flood) // 2, "most of the flood was looked up before the new tenant came"
    overtook = started.index(victim.auth.split(":")[0]) - sent_after
    assert overtook <= 32, f"{overtook} made-up keys were looked up between the new tenant's request and its lookup"


def test_work_queued_in_a_burst_starts_on_as_many_threads_as_it_needs() -> None:
    pool = FairPool(3)
    try:
        assert pool.submit(lambda: None).result(5) is None  # one thread now, idle
        inside = threading.Barrier(3, timeout=5)
        futures = [pool.submit_as("burst", inside.wait) for _ in range(3)]  # the idle thread and two new ones
        assert sorted(f.result(5) for f in futures) == [0, 1, 2]
    finally:
        pool.shutdown()
