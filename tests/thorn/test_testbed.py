"""End to end: a 3-host testbed (FRR, BFD, EVPN, daemons) — failover, silent faults, a dying FRR daemon."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import time

import pytest
import requests

from owx.thorn import faults, measure, netns
from owx.thorn.faults import FaultKind
from owx.thorn.notices import Notice
from owx.thorn.probe import outage_ms
from owx.thorn.testbed import Testbed

# A bound for a shared CI machine; `owx bench thorn` checks the real goals. A failover that never
# happens reads as the whole window (the probe counts a flow that has not answered again to its end).
WINDOW_S = 2.0
MAX_OUTAGE_MS = 1000


@pytest.fixture(scope="module")
def tb(frr_installed):
    bed = Testbed(f"x{secrets.token_hex(2)}")
    try:
        bed.up(hosts=3, period_s=1.0, wait=90)
        yield bed
    finally:
        bed.down()
        assert netns.listing(bed.prefix) == []
        assert not bed.dir.exists()


def overlay_ping(tb: Testbed, src: int, dst: int) -> bool:
    ns = f"{tb.prefix}a{src}"
    return netns.run(ns, ["ping", "-c", "2", "-i", "0.2", "-W", "1", f"192.168.100.{dst}"], check=False).returncode == 0


def uplink_tx(tb: Testbed, host: str) -> dict[str, int]:
    return {u.name: measure.tx_packets(f"{tb.prefix}{host}", u.name) for u in tb.node(host).uplinks}


def outage_through(tb: Testbed, fault: faults.Fault, port: int, during=lambda: None) -> float:
    """The longest round-trip outage of 16 probe flows a1 <-> a2 while ``fault`` lasts WINDOW_S.

    The probe runs through the whole window; ``during`` is called right after the injection.
    """
    echo = measure.probe(f"{tb.prefix}a2", "echo", f"192.168.100.2:{port}")
    time.sleep(0.3)
    client = measure.probe(f"{tb.prefix}a1", "rt-client", f"192.168.100.2:{port}", "--flows", "16",
                           "--interval-ms", "5")
    try:
        time.sleep(0.5)
        before = uplink_tx(tb, "h1")
        time.sleep(0.5)
        used = {u: n - before[u] for u, n in uplink_tx(tb, "h1").items()}
        # every uplink carries at least one of the 16 flows (ECMP hashes flows, so shares vary: with 16 flows
        # one uplink gets 3 or fewer about one run in fifty)
        assert min(used.values()) > sum(used.values()) / 32, f"the flows do not use every uplink of h1: {used}"
        started = time.monotonic()
        fault.inject()
        during()
        time.sleep(max(0.0, started + WINDOW_S - time.monotonic()))
        ended = time.monotonic()
        report = client.finish()
    finally:
        if client.alive():
            client.finish()
        echo.finish()
        fault.clear()
    tb.wait_converged(60)
    assert sum(f["received"] for f in report["flows"]) > 1000
    return max(outage_ms(f["gaps"], started, ended) for f in report["flows"])


def test_overlay_reaches_every_host(tb):
    state = tb.state("h1")
    assert {r["mac"] for r in state["rules"]} == {"02:00:00:00:01:02", "02:00:00:00:01:03"}
    assert all(len(p) == 2 for p in state["paths"].values())
    assert state["reconciler"]["driver"] == "u32"
    assert overlay_ping(tb, 1, 2) and overlay_ping(tb, 1, 3) and overlay_ping(tb, 3, 2)


def test_link_down_fails_over(tb):
    outage = outage_through(tb, faults.resolve(tb, FaultKind.link_down, "h1/up1"), 9100)
    assert outage < MAX_OUTAGE_MS


def test_silent_drop_is_detected_by_bfd(tb):
    seen_down = []

    def watch_bfd() -> None:
        deadline = time.monotonic() + WINDOW_S - 0.2
        while time.monotonic() < deadline and not seen_down:
            if "up2" in tb.state("h1")["failover"]["down"]:
                seen_down.append("up2")
            time.sleep(0.05)

    outage = outage_through(tb, faults.resolve(tb, FaultKind.silent, "h1/up2"), 9101, during=watch_bfd)
    assert outage < MAX_OUTAGE_MS
    assert seen_down, "BFD never reported the silently dropping link"


def test_remote_nodes_learn_a_lost_uplink_and_forget_it(tb):
    fault = faults.resolve(tb, FaultKind.link_down, "h1/up2")
    fault.inject()
    try:
        # h2 learns the loss and routes to h1 over t1 only; its reported paths join the steering's
        # override with the reconciler's view, two processes that report a route change a few ms apart
        deadline = time.monotonic() + 10
        while (state := tb.state("h2"))["failover"]["remote_lost"].get("10.255.0.1") != [65102] \
                or state["paths"]["10.255.0.1"] != ["172.16.1.2@up1"]:
            assert time.monotonic() < deadline, f"h2 does not steer around h1's lost uplink to t2: {state}"
            time.sleep(0.05)
    finally:
        fault.clear()
        tb.wait_converged(60)  # a failure here must not leave the next test a testbed in failover
    deadline = time.monotonic() + 5
    while (fo := tb.state("h2")["failover"])["remote_lost"] or fo["overrides"]:
        assert time.monotonic() < deadline, f"h2 still steers around h1/up2: {fo}"
        time.sleep(0.2)
    assert netns.run(f"{tb.prefix}h2", ["ip", "route", "show", "table", "116"]).stdout.strip() == ""


def test_forged_and_malformed_notices_are_ignored(tb):
    tb.wait_converged(60)
    before = tb.state("h2")["failover"]["notices_rejected"]
    forged = Notice(vtep="10.255.0.1", epoch=time.time(), seq=10**9, lost=[65101, 65102]).model_dump_json()
    sent = [forged.encode(), b"not json", b'{"vtep": "10.255.0.3", "epoch": 1, "seq": 1, "lost": ["x"]}']
    with netns.entered(f"{tb.prefix}h3"):  # h3 pretends to be h1, then sends garbage
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("10.255.0.3", 0))
    with sock:
        for data in sent:
            sock.sendto(data, ("10.255.0.2", 4799))
    deadline = time.monotonic() + 3
    while (fo := tb.state("h2")["failover"])["notices_rejected"] < before + len(sent):
        assert time.monotonic() < deadline, f"h2 did not reject the datagrams: {fo}"
        time.sleep(0.05)
    assert fo["remote_lost"] == {} and fo["overrides"] == {}


def test_flows_spread_over_both_uplinks_in_both_directions(tb):
    echo = measure.probe(f"{tb.prefix}a2", "echo", "192.168.100.2:9102")
    time.sleep(0.3)
    # 64 flows, each sent every 20 ms (the packets of 16 at the probe's 5 ms): the hash of 16 flows puts
    # 2 or fewer on one uplink (14% of the packets: a CI run failed so) about once in a hundred runs; of
    # 64, fewer than 10 about once in 10^8
    client = measure.probe(f"{tb.prefix}a1", "rt-client", "192.168.100.2:9102", "--flows", "64",
                           "--interval-ms", "20")
    try:
        time.sleep(0.5)
        before = {h: uplink_tx(tb, h) for h in ("h1", "h2")}
        time.sleep(1.0)
        sent = {h: {u: n - before[h][u] for u, n in uplink_tx(tb, h).items()} for h in ("h1", "h2")}
    finally:
        client.finish()
        echo.finish()
    for host, counts in sent.items():  # one path per remote VTEP would put ~all on one uplink
        assert min(counts.values()) > 0.15 * sum(counts.values()), f"{host} sends on one uplink only: {counts}"


def test_datapath_can_be_switched_at_run_time(tb):
    hosts = ("h1", "h2", "h3")
    try:
        for host in hosts:
            ok = requests.post(tb.daemon_url(host) + "/reconciler", json={"driver": "fdb"}, timeout=5)
            assert ok.status_code == 200 and ok.json()["driver"] == "fdb"
        deadline = time.monotonic() + 10
        # the reconciler's next pass removes the u32 devices, then reports the new driver
        while "thx" in netns.run(f"{tb.prefix}h1", ["ip", "-o", "link"]).stdout \
                or tb.state("h1")["reconciler"]["driver"] != "fdb":
            assert time.monotonic() < deadline, "the u32 datapath was not replaced by fdb"
            time.sleep(0.2)
        assert json.loads(netns.run(f"{tb.prefix}h1", ["tc", "-j", "filter", "show", "dev", "vapp0",
                                                       "ingress"]).stdout or "[]") == []
        assert overlay_ping(tb, 1, 2) and overlay_ping(tb, 3, 1)
    finally:
        for host in hosts:
            requests.post(tb.daemon_url(host) + "/reconciler", json={"driver": "u32"}, timeout=5)
    deadline = time.monotonic() + 10
    while "thx0aff0002" not in netns.run(f"{tb.prefix}h1", ["ip", "-o", "link"]).stdout:
        assert time.monotonic() < deadline, "the u32 datapath did not come back"
        time.sleep(0.2)
    assert overlay_ping(tb, 1, 2)


def test_metrics_are_prometheus_text(tb):
    text = requests.get(tb.daemon_url("h1") + "/metrics", timeout=5).text
    assert '# TYPE thorn_paths gauge' in text
    assert 'thorn_paths{node="h1",vtep="10.255.0.2"} 2' in text
    assert 'thorn_frr_daemon_up{node="h1",daemon="bgpd"} 1' in text
    assert 'thorn_failover_overrides{node="h1"} 0' in text and "# TYPE thorn_path_notices_sent_total counter" in text


def test_dead_frr_daemon_is_reported_and_forwarding_continues(tb):
    pid = int((tb.dir / "h1" / "zebra.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while True:  # a health poll between the kill and vtysh's answer may first report only vtysh's error
        health = requests.get(tb.daemon_url("h1") + "/healthz", timeout=5)
        if health.status_code == 503 and any("FRR daemon zebra is not running" in e for e in health.json()["errors"]):
            break
        assert time.monotonic() < deadline, f"daemon did not report zebra died: {health.status_code} {health.text}"
        time.sleep(0.5)
    assert 'thorn_frr_daemon_up{node="h1",daemon="zebra"} 0' in requests.get(
        tb.daemon_url("h1") + "/metrics", timeout=5).text
    assert overlay_ping(tb, 1, 2) and overlay_ping(tb, 2, 1)
    assert tb.state("h1")["reconciler"]["last_error"] is None


def test_reconciler_control_validates(tb):
    url = tb.daemon_url("h2") + "/reconciler"
    bad = requests.post(url, data='{"drop_events": 3}', timeout=5)
    assert bad.status_code == 400 and "drop_events" in bad.json()["error"] and bad.json()["code"] == 400
    assert requests.post(url, data="not json", timeout=5).status_code == 400
    assert requests.post(url, json={"driver": "ebpf"}, timeout=5).status_code == 400
    assert requests.post(url, json={"fast_failover": "sometimes"}, timeout=5).status_code == 400
    ok = requests.post(url, json={"drop_events": 0.5}, timeout=5)
    assert ok.status_code == 200 and ok.json()["drop_events"] == 0.5
    requests.post(url, json={"drop_events": 0.0}, timeout=5)


def test_frr_reload_changes_bfd_timers(tb):
    from owx.thorn.frr import FrrInstance
    from owx.thorn.frr_config import host_config
    from owx.thorn.model import BfdSpec

    node = tb.node("h3")
    frr = FrrInstance(node.netns, node.run_dir)
    try:
        frr.reload(host_config(node.model_copy(update={"bfd": BfdSpec(receive_ms=40, transmit_ms=40)})))
        peers = frr.vtysh_json("show bfd peers json")
        assert peers and all(p["receive-interval"] == 40 and p["transmit-interval"] == 40 for p in peers)
        assert "receive-interval 40" in (node.run_dir / "bfdd.conf").read_text()
    finally:
        frr.reload(host_config(node))
    assert all(p["receive-interval"] == 20 for p in frr.vtysh_json("show bfd peers json"))
