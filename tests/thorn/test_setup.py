"""Node setup through pyroute2 on real namespaces."""

from __future__ import annotations

import json

import pytest

from owx.thorn import netns
from owx.thorn.model import AppDeviceSpec, NodeSpec, UplinkSpec
from owx.thorn.setup import SetupError, setup_node, teardown_node


def make_node(prefix: str, **extra) -> NodeSpec:
    return NodeSpec(
        name="s1", netns=f"{prefix}h1", loopback="10.255.0.1", asn=65001,
        uplinks=[UplinkSpec(name="up1", address="172.16.1.1/31", peer="172.16.1.0", peer_asn=65101),
                 UplinkSpec(name="up2", address="172.16.2.1/31", peer="172.16.2.0", peer_asn=65102)],
        app_devices=[AppDeviceSpec(port="vapp0", netns=f"{prefix}a1", address="192.168.100.1/24",
                                   mac="02:00:00:00:01:01"),
                     AppDeviceSpec(name="mv0", kind="macvlan", port="mvport", netns=f"{prefix}a2",
                                   address="192.168.100.11/24", mac="02:00:00:00:01:11")],
        **extra)


def with_uplinks(prefix: str, names=("up1", "up2")) -> None:
    netns.create(f"{prefix}h1")
    netns.create(f"{prefix}t")
    for name in names:
        netns.run(f"{prefix}t", ["ip", "link", "add", f"p{name}", "type", "veth", "peer", "name", name,
                                 "netns", f"{prefix}h1"])


def ipj(ns: str, *args: str):
    return json.loads(netns.run(ns, ["ip", "-j", "-d", *args]).stdout)


def test_setup_builds_the_node(prefix):
    with_uplinks(prefix)
    node = make_node(prefix)
    setup_node(node)
    setup_node(node)  # idempotent: a restarted daemon re-runs it
    ns = f"{prefix}h1"
    lo = ipj(ns, "addr", "show", "lo")[0]
    assert {"local": "10.255.0.1", "prefixlen": 32} in [
        {k: a[k] for k in ("local", "prefixlen")} for a in lo["addr_info"]]
    up1 = ipj(ns, "addr", "show", "up1")[0]
    assert up1["addr_info"][0]["local"] == "172.16.1.1" and "UP" in up1["flags"]
    vtep = ipj(ns, "link", "show", "vtep0")[0]
    data = vtep["linkinfo"]["info_data"]
    assert (data["id"], data["local"], data["port"], data["learning"]) == (100, "10.255.0.1", 4789, False)
    assert vtep["master"] == "br0" and vtep["mtu"] == 1450
    assert vtep["linkinfo"]["info_slave_data"]["learning"] is False
    port = ipj(ns, "link", "show", "vapp0")[0]
    assert port["master"] == "br0"
    app = ipj(f"{prefix}a1", "addr", "show", "app0")[0]
    assert app["address"] == "02:00:00:00:01:01" and app["addr_info"][0]["local"] == "192.168.100.1"
    mv = ipj(f"{prefix}a2", "link", "show", "mv0")[0]
    assert mv["linkinfo"]["info_kind"] == "macvlan" and mv["address"] == "02:00:00:00:01:11"
    fdb = json.loads(netns.run(ns, ["bridge", "-j", "fdb", "show", "dev", "vapp0"]).stdout)
    assert any(e["mac"] == "02:00:00:00:01:01" and e.get("state") == "static" for e in fdb)
    sysctl = netns.run(ns, ["sysctl", "-n", "net.ipv4.conf.all.ignore_routes_with_linkdown",
                            "net.ipv4.fib_multipath_hash_policy"]).stdout.split()
    assert sysctl == ["1", "1"]
    teardown_node(node)
    assert netns.run(ns, ["ip", "link", "show", "vtep0"], check=False).returncode != 0


def test_missing_uplink_is_named(prefix):
    with_uplinks(prefix, names=("up1",))
    with pytest.raises(SetupError, match=rf"interface 'up2' does not exist in namespace {prefix}h1"):
        setup_node(make_node(prefix))
    # nothing half-built: the check runs before any change
    assert netns.run(f"{prefix}h1", ["ip", "link", "show", "br0"], check=False).returncode != 0


def test_sriov_without_hardware_is_a_clear_error(prefix):
    with_uplinks(prefix)
    node = make_node(prefix).model_copy(update={"app_devices": [AppDeviceSpec(
        kind="sriov", pf="up1", vf=0, port="rep0", netns=f"{prefix}a1", address="192.168.100.1/24",
        mac="02:00:00:00:01:01")]})
    with pytest.raises(SetupError, match="has 0 SR-IOV VFs"):
        setup_node(node)
