"""Bad input through the command line: clear messages and exit codes."""

from __future__ import annotations

import subprocess
import sys

import yaml

from owx.thorn import netns
from owx.thorn.topology import build_cluster


def owx(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "owx.cli", "thorn", *args], capture_output=True, text=True,
                          timeout=60)


def test_malformed_node_description(tmp_path):
    path = tmp_path / "node.yaml"
    path.write_text("name: h1\nloopback: not-an-ip\nasn: 65001\n")
    result = owx("run", "--node", str(path))
    assert result.returncode == 2
    assert "invalid NodeSpec" in result.stderr and "loopback" in result.stderr and "uplinks" in result.stderr


def test_missing_interface(tmp_path, prefix):
    node = build_cluster(prefix.removeprefix("thn-").rstrip("-"), hosts=2).nodes[0]
    node = node.model_copy(update={"frr_dir": tmp_path / "frr"})
    netns.create(node.netns)
    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump(node.model_dump(mode="json")))
    result = owx("run", "--node", str(path))
    assert result.returncode == 1
    assert f"interface 'up1' does not exist in namespace {node.netns}" in result.stderr


def test_config_preview_and_unknown_testbed(tmp_path):
    node = build_cluster("cli", hosts=2).nodes[0]
    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump(node.model_dump(mode="json")))
    result = owx("config", "--node", str(path))
    assert result.returncode == 0 and "no zebra nexthop kernel enable" in result.stdout
    result = owx("testbed", "fault", "--name", "nosuchbed", "link-down", "h1/up1")
    assert result.returncode == 1 and "is not up" in result.stderr
    result = owx("testbed", "fault", "--name", "nosuchbed", "link-down", "h1")
    assert result.returncode == 1
