"""Datapath drivers and the reconciler on real namespaces (two nodes back to back, no FRR)."""

from __future__ import annotations

import json
import time

import pytest

from owx.thorn import netns
from owx.thorn.datapath.detect import capabilities
from owx.thorn.datapath.tc import RX_DEV, tc
from owx.thorn.measure import tx_packets
from owx.thorn.model import DriverName

from twonodes import evpn_entry, two_nodes


def wait_for(predicate, timeout: float, step: float = 0.05) -> float:
    """Seconds until predicate() is true; fail after timeout."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            pytest.fail(f"condition not met within {timeout}s")
        time.sleep(step)
    return time.monotonic() - started


def test_capability_detection_matches_this_kernel():
    caps = capabilities()
    assert DriverName.fdb in caps
    # u32 + mirred exist on every kernel this runs on; flower only where cls_flower/act_tunnel_key are built
    assert DriverName.u32 in caps
    assert netns.listing("thn-cap-") == []


def test_u32_forwards_through_per_remote_devices(prefix):
    with two_nodes(prefix, "u32") as pair:
        assert pair.rec_a.driver.name == "u32"
        mac_b = pair.b.app_devices[0].mac
        assert pair.rec_a.driver.installed() == {mac_b}
        before = tx_packets(pair.a.netns, "thx0aff0002")
        result = pair.ping(5)
        assert result.returncode == 0, result.stdout
        # the frames left through the per-remote device chosen by the u32 rule, and came in via thrx
        assert tx_packets(pair.a.netns, "thx0aff0002") - before >= 5
        assert tx_packets(pair.b.netns, "thx0aff0001") >= 5
        status = pair.rec_a.status
        assert [r.mac for r in status.rules] == [mac_b]
        assert status.paths["10.255.0.2"][0].dev == "up1"


def test_u32_rule_follows_fdb_and_route_events(prefix):
    with two_nodes(prefix, "u32") as pair:  # 30 s period: only events can explain a fast change
        mac_b = pair.b.app_devices[0].mac
        evpn_entry(pair.a, mac_b, "10.255.0.2", add=False)
        took = wait_for(lambda: pair.rec_a.driver.installed() == set(), 3)
        assert took < 3 and pair.rec_a.status.last_reason == "event"
        evpn_entry(pair.a, mac_b, "10.255.0.2")
        wait_for(lambda: pair.rec_a.driver.installed() == {mac_b}, 3)
        # no route to the VTEP -> no rule
        netns.run(pair.a.netns, ["ip", "route", "del", "10.255.0.2/32"])
        wait_for(lambda: pair.rec_a.driver.installed() == set(), 3)
        netns.run(pair.a.netns, ["ip", "route", "add", "10.255.0.2/32", "via", "172.16.9.1"])
        wait_for(lambda: pair.rec_a.driver.installed() == {mac_b}, 3)
        assert pair.ping().returncode == 0


def test_fdb_driver_programs_bridge_entries(prefix):
    with two_nodes(prefix, "fdb") as pair:
        mac_b = pair.b.app_devices[0].mac
        out = netns.run(pair.a.netns, ["bridge", "-j", "fdb", "show", "br", "br0"]).stdout
        entries = [e for e in json.loads(out) if e["mac"] == mac_b and "self" not in e.get("flags", [])]
        assert entries and entries[0]["ifname"] == "vtep0" and entries[0].get("state") == "static"
        assert pair.ping().returncode == 0
        evpn_entry(pair.a, mac_b, "10.255.0.2", add=False)
        wait_for(lambda: pair.rec_a.driver.installed() == set(), 3)


def test_reconciler_converges_within_period_when_every_event_is_dropped(prefix):
    period = 1.0
    with two_nodes(prefix, "u32", period_s=period, drop=1.0) as pair:
        rec = pair.rec_a
        mac_new = "02:00:00:00:0a:0a"
        evpn_entry(pair.a, mac_new, "10.255.0.2")
        took = wait_for(lambda: mac_new in [r.mac for r in rec.status.rules], period + 2.0)
        assert took <= period + 2.0 and mac_new in rec.driver.installed()
        assert rec.status.events_dropped > 0 and rec.status.last_reason == "period"
        # someone deletes our tc filter behind our back: the periodic dump puts it back
        filters = json.loads(tc(pair.a.netns, ["-json", "filter", "show", "dev", "vapp0", "ingress"]))
        handle = next(f["options"]["fh"] for f in filters if f.get("options", {}).get("actions"))
        tc(pair.a.netns, ["filter", "del", "dev", "vapp0", "ingress", "pref", "100", "handle", handle,
                          "protocol", "all", "u32"])
        assert len(rec.driver.installed()) == 1
        wait_for(lambda: len(rec.driver.installed()) == 2, period + 2.0)
        # and the rx hand-off rule as well
        tc(pair.a.netns, ["filter", "del", "dev", RX_DEV, "ingress"])
        wait_for(lambda: pair.ping(1).returncode == 0, period + 3.0, step=0.2)


def test_missing_app_port_is_reported_not_fatal(prefix):
    with two_nodes(prefix, "u32", period_s=0.5) as pair:
        netns.run(pair.a.netns, ["ip", "link", "del", "vapp0"])
        before = pair.rec_a.status.reconciles
        wait_for(lambda: pair.rec_a.status.reconciles > before + 1, 5)
        assert pair.rec_a.status.last_error is None  # a port that is gone is simply not programmed
        assert pair.rec_a._thread and pair.rec_a._thread.is_alive()
