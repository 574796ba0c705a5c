from __future__ import annotations

import ipaddress

import pytest
import yaml

from owx.thorn.model import ClusterSpec, NodeSpec, ThornConfigError, direct_vni, load_cluster, load_node
from owx.thorn.topology import build_cluster

NODE = {
    "name": "h1",
    "netns": "thn-m-h1",
    "loopback": "10.255.0.1",
    "asn": 65001,
    "uplinks": [
        {"name": "up1", "address": "172.16.1.1/31", "peer": "172.16.1.0", "peer_asn": 65101},
        {"name": "up2", "address": "172.16.2.1/31", "peer": "172.16.2.0", "peer_asn": 65102},
    ],
    "app_devices": [{"port": "vapp0", "netns": "thn-m-a1", "address": "192.168.100.1/24",
                     "mac": "02:00:00:00:01:01"}],
}


def write(tmp_path, data, name="node.yaml"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def test_valid_node_loads_with_defaults(tmp_path):
    node = load_node(write(tmp_path, NODE))
    assert node.loopback == ipaddress.IPv4Address("10.255.0.1")
    assert node.overlay.vni == 100 and node.overlay.vtep == "vtep0"
    assert node.bfd.detect_ms == 60
    assert node.app_devices[0].name == "app0"


@pytest.mark.parametrize("change, where, words", [
    ({"loopback": "10.255.0.300"}, "loopback", "IPv4"),
    ({"asn": 65101}, "", "equals a ToR AS"),
    ({"netns": "h1"}, "netns", "pattern"),
    ({"uplinks": []}, "uplinks", "at least 1"),
    ({"uplinks": [{**NODE["uplinks"][0], "peer": "172.16.9.0"}]}, "uplinks.0", "is not another address"),
    ({"uplinks": [NODE["uplinks"][0], NODE["uplinks"][0]]}, "", "duplicate uplink"),
    ({"app_devices": [{**NODE["app_devices"][0], "mac": "01:00:00:00:00:01"}]}, "app_devices.0.mac", "multicast"),
    ({"app_devices": [{**NODE["app_devices"][0], "mac": "zz"}]}, "app_devices.0.mac", "not a MAC"),
    ({"app_devices": [{**NODE["app_devices"][0], "kind": "sriov"}]}, "app_devices.0", "needs pf and vf"),
    ({"bfd": {"receive_ms": 1}}, "bfd.receive_ms", "greater than or equal"),
    ({"colour": "blue"}, "colour", "Extra inputs"),
])
def test_invalid_node_names_the_field(tmp_path, change, where, words):
    with pytest.raises(ThornConfigError) as err:
        load_node(write(tmp_path, {**NODE, **change}))
    text = str(err.value)
    assert "invalid NodeSpec" in text and words in text and where in text


@pytest.mark.parametrize("text, words", [
    ("name: [unclosed", "not valid YAML"),
    ("- a\n- b\n", "expected a mapping"),
])
def test_malformed_file(tmp_path, text, words):
    with pytest.raises(ThornConfigError, match=words):
        load_node(write(tmp_path, text))


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ThornConfigError, match="cannot read"):
        load_node(tmp_path / "absent.yaml")


def test_cluster_round_trip_and_cross_checks(tmp_path):
    cluster = build_cluster("m", hosts=3)
    path = write(tmp_path, cluster.model_dump(mode="json"), "cluster.yaml")
    assert load_cluster(path) == cluster
    data = cluster.model_dump(mode="json")
    data["links"][0]["tor"] = "t9"
    with pytest.raises(ThornConfigError, match="unknown tor 't9'"):
        load_cluster(write(tmp_path, data, "bad.yaml"))
    data = cluster.model_dump(mode="json")
    data["nodes"][1]["loopback"] = data["nodes"][0]["loopback"]
    with pytest.raises(ThornConfigError, match="duplicate loopback"):
        load_cluster(write(tmp_path, data, "dup.yaml"))


def test_direct_vni_is_per_loopback_and_outside_segment_vnis():
    a, b = direct_vni(ipaddress.IPv4Address("10.255.0.1")), direct_vni(ipaddress.IPv4Address("10.255.0.2"))
    assert a != b and a > 0x7FFFFF and b <= 0xFFFFFF
    # two loopbacks equal in their low 23 bits would share one: the cluster rejects that
    nodes = [NodeSpec.model_validate({**NODE, "name": "a"}),
             NodeSpec.model_validate({**NODE, "name": "b", "loopback": "10.127.0.1"})]
    with pytest.raises(ValueError, match="duplicate direct VNI"):
        ClusterSpec(nodes=nodes)
