"""Fixtures for thorn tests: root, FRR installed, private namespace prefixes removed afterwards."""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

import pytest

from owx.thorn import netns


@pytest.fixture(scope="session", autouse=True)
def _requirements() -> None:
    if os.geteuid() != 0:
        pytest.fail("thorn tests need root (network namespaces)")
    for tool in ("tc", "nft", "ip", "bridge"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: apt-get install iproute2 nftables")


@pytest.fixture(scope="session")
def frr_installed() -> None:
    if not Path("/usr/lib/frr/zebra").exists() or shutil.which("vtysh") is None:
        pytest.fail("FRR is missing: apt-get install frr")


@pytest.fixture
def prefix():
    """A unique namespace prefix (thn-x<hex>-); every namespace under it is removed afterwards."""
    pre = f"thn-x{secrets.token_hex(3)}-"
    try:
        yield pre
    finally:
        for ns in netns.listing(pre):
            netns.remove(ns)
