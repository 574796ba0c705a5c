from __future__ import annotations

import subprocess

import pytest

from owx.thorn.frr_config import BgpPeer, host_config, tor_config
from owx.thorn.model import BfdSpec, NodeSpec
from owx.thorn.topology import build_cluster


@pytest.fixture
def node() -> NodeSpec:
    return build_cluster("cfg", hosts=2, bfd=BfdSpec(receive_ms=30, transmit_ms=40, detect_multiplier=5)).nodes[0]


def frr_accepts(tmp_path, text: str) -> subprocess.CompletedProcess:
    path = tmp_path / "frr.conf"
    path.write_text(text)
    return subprocess.run(["vtysh", "--dryrun", "-f", str(path)], capture_output=True, text=True)


def test_host_config_is_valid_frr(tmp_path, frr_installed, node):
    result = frr_accepts(tmp_path, host_config(node).integrated())
    assert result.returncode == 0, result.stdout + result.stderr


def test_dry_run_does_reject_nonsense(tmp_path, frr_installed):
    assert frr_accepts(tmp_path, "router bgp 1\n neighbor 1.2.3.4 frobnicate\n").returncode != 0


def test_host_config_content(node):
    cfg = host_config(node)
    assert "no zebra nexthop kernel enable" in cfg.zebra
    assert "  detect-multiplier 5\n  receive-interval 30\n  transmit-interval 40" in cfg.bfdd
    for uplink in node.uplinks:
        assert f" neighbor {uplink.peer} remote-as {uplink.peer_asn}" in cfg.bgpd
        assert f" neighbor {uplink.peer} bfd profile {node.bfd.profile}" in cfg.bgpd
        assert f"  neighbor {uplink.peer} activate" in cfg.bgpd
    assert f"  network {node.loopback}/32" in cfg.bgpd
    assert f"permit {node.loopback}/32" in cfg.bgpd  # announces only its loopback
    assert "advertise-all-vni" in cfg.bgpd and f"route-target import {node.overlay.rt}" in cfg.bgpd


def test_tor_config_keeps_vtep_next_hop(tmp_path, frr_installed):
    cluster = build_cluster("cfg", hosts=2)
    peers = [BgpPeer("172.16.1.1", 65001), BgpPeer("172.16.1.3", 65002)]
    cfg = tor_config(cluster.tors[0], peers, BfdSpec(), "/tmp")
    assert "  neighbor 172.16.1.3 attribute-unchanged next-hop" in cfg.bgpd
    assert "advertise-all-vni" not in cfg.bgpd
    assert frr_accepts(tmp_path, cfg.integrated()).returncode == 0
