"""Start measuring roles (``owx.thorn.probe``, ``owx.thorn.pair``) in testbed namespaces; read link counters."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from owx.thorn import netns
from owx.thorn.setup import require

# Real-time, below FRR's daemons: other tenants' CPU load must not read as a network outage.
RT_PRIORITY = 20


class RoleProcess:
    """``python -m MODULE ROLE ARGS... --out FILE`` running in a namespace until :meth:`finish`."""

    def __init__(self, ns: str, module: str, role: str, *args: str) -> None:
        self.out = Path(tempfile.mkstemp(prefix=f"thn-{role}-", suffix=".json")[1])
        argv = netns.wrap(ns, ["chrt", "--fifo", str(RT_PRIORITY), sys.executable, "-m", module, role, *args,
                               "--out", str(self.out)])
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
        assert self.proc.stderr is not None
        err = self.proc.stderr.read().decode()
        self.proc.stderr.close()
        try:
            return json.loads(self.out.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise RuntimeError(f"{' '.join(self.proc.args[-6:])} produced no report: {err[-800:]}") from exc
        finally:
            self.out.unlink(missing_ok=True)


def probe(ns: str, role: str, addr: str, *args: str) -> RoleProcess:
    """A round-trip probe role (``echo`` or ``rt-client``)."""
    return RoleProcess(ns, "owx.thorn.probe", role, addr, *args)


def pair(ns: str, role: str, *args: str) -> RoleProcess:
    """A long-running pair role (``server`` or ``client``)."""
    return RoleProcess(ns, "owx.thorn.pair", role, *args)


def tx_packets(ns: str, dev: str) -> int:
    with netns.ipr(ns) as ipr:
        link = ipr.get_links(require(ipr, dev, ns))[0]
        return link.get("IFLA_STATS64")["tx_packets"]
