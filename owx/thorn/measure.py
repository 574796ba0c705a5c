"""Start probe processes in testbed namespaces; find the uplink a flow uses."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from owx.thorn import netns
from owx.thorn.setup import require
from owx.thorn.testbed import Testbed


class ProbeProcess:
    """One ``owx.thorn.probe`` role running in a namespace."""

    def __init__(self, ns: str, role: str, address: str, interval_ms: float = 1.0) -> None:
        self.out = Path(tempfile.mkstemp(prefix=f"thn-{role}-", suffix=".json")[1])
        argv = netns.wrap(ns, [sys.executable, "-m", "owx.thorn.probe", role, address,
                               "--interval-ms", str(interval_ms), "--out", str(self.out)])
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def finish(self, timeout: float = 10) -> dict:
        """SIGTERM, wait, and return the report."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        err = self.proc.stderr.read().decode() if self.proc.stderr else ""
        self.proc.stderr and self.proc.stderr.close()
        try:
            return json.loads(self.out.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise RuntimeError(f"probe produced no report: {err[-800:]}") from exc
        finally:
            self.out.unlink(missing_ok=True)


def tx_packets(ns: str, dev: str) -> int:
    with netns.ipr(ns) as ipr:
        link = ipr.get_links(require(ipr, dev, ns))[0]
        return link.get("IFLA_STATS64")["tx_packets"]


def busiest_uplink(tb: Testbed, node: str, seconds: float = 0.3) -> str:
    """The uplink of ``node`` that sent the most packets over ``seconds`` (the one a flow hashes to)."""
    spec = tb.node(node)
    assert spec.netns is not None
    before = {u.name: tx_packets(spec.netns, u.name) for u in spec.uplinks}
    time.sleep(seconds)
    delta = {u: tx_packets(spec.netns, u) - n for u, n in before.items()}
    return max(delta, key=delta.__getitem__)
