"""``owx up`` on a machine whose HOME it cannot write: it serves anyway and says why no ~/.wskprops."""

from __future__ import annotations

from pathlib import Path

import requests

from owx.bench.gateway_process import start_gateway_process


def test_up_serves_and_says_so_when_home_cannot_hold_wskprops(tmp_path: Path) -> None:
    missing_home = tmp_path / "no-such-home"
    gateway = start_gateway_process(tmp_path / "gw", env={"HOME": str(missing_home)})
    try:
        assert gateway.process.stdout is not None
        said = gateway.process.stdout.readline()
        assert said.startswith("~/.wskprops not written (No such file or directory:"), said
        assert str(missing_home / ".wskprops") in said
        namespaces = requests.get(f"{gateway.url}/api/v1/namespaces", auth=tuple(gateway.auth.split(":", 1)), timeout=10)
        assert namespaces.json() == ["guest"]
        assert not missing_home.exists()
    finally:
        gateway.stop()
