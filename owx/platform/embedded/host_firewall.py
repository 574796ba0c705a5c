"""Which of this machine's own network services one instance's local containers may reach.

Local containers keep the host's network namespace, so actions reach the network; without a rule, a
tenant's action could also connect to anything listening on this machine: a Redis or CouchDB bound
to 127.0.0.1, another tenant's server, a service on the machine's public address. The firewall is
one nftables table per uid block (``inet owx_sandbox_<first uid>``, see
:mod:`owx.platform.embedded.uid_block`): a packet that a socket of the block's uids sends to any
address of this machine (all of them leave through ``lo``; IPv4 and IPv6) is refused, a TCP
connection at once (ECONNREFUSED), anything else when it is sent (EPERM), unless it goes to an
open TCP port. Open are the gateway's own listeners (``__OW_API_HOST``), a configured Canary
store's port, and ``sandbox.host_ports``. Of other machines, the link-local ones (169.254.0.0/16)
and ``fd00:ec2::254`` are refused too: there a cloud's instance metadata service hands out the
machine's credentials.
Traffic to other machines is otherwise untouched. The next holder of a block replaces a table its
dead predecessor left, and a new firewall deletes the tables of blocks no live instance holds.

Docker containers (blackbox actions, the ``docker`` platform kind) have network namespaces of their
own, on the instance's own Docker network (bridge ``owxd<first uid>``, no traffic between its
containers): what they send to this machine through that bridge is refused the same way, except
replies to the gateway's own connections, and their packets to the metadata addresses are not
forwarded. The bridge's own address stands for 127.0.0.1 at the open ports (`alias_loopback`:
the container's ``__OW_API_HOST`` names it, and the gateway listens on loopback only).

What ports cannot describe: abstract Unix sockets, closed by the sandbox's Landlock scope (Linux
6.12 and later; on an older kernel they stay open, and the platform logs so at start), and an open
port whose service is down, which an action binding it would squat: no container binds a TCP or UDP
port (:mod:`owx.platform.embedded.port_binds`). A TCP socket that listens without a bind still gets
a port (the kernel picks it): no socket of the block's uids answers a connection (its SYN-ACK is
dropped), so no action is a TCP server anyone reaches. Abstract socket names an action binds are
not covered (a network namespace per container would be). TCP between an action's own processes
over loopback is refused like any other local traffic (they talk over pipes or Unix sockets in /tmp).
"""

from __future__ import annotations

import ipaddress
import logging
import subprocess
import threading
from collections.abc import Iterable
from pathlib import Path

from owx.platform.embedded import uid_block
from owx.platform.embedded.uid_block import UidBlock

log = logging.getLogger(__name__)
TABLE_PREFIX = "owx_sandbox_"
METADATA_V6 = "fd00:ec2::254"  # AWS's instance metadata over IPv6; over IPv4 every cloud's is in 169.254.0.0/16


class FirewallError(RuntimeError):
    pass


class HostFirewall:
    """The nftables table that keeps one uid block's sockets off this machine's services."""

    def __init__(self, block: UidBlock, open_ports: Iterable[int] = ()) -> None:
        self.table = f"{TABLE_PREFIX}{block.first}"
        _delete_dead_tables()
        self._open: set[int] = set()
        self._lock = threading.Lock()
        self.bridge = docker_bridge(block.first)
        uids, bridge = f"{block.first}-{block.last}", self.bridge
        _nft(f"""table inet {self.table}
delete table inet {self.table}
table inet {self.table} {{
  set open_ports {{ type inet_service; }}
  chain output {{
    type filter hook output priority filter; policy accept;
    oifname "lo" meta skuid {uids} tcp dport @open_ports accept
    oifname "lo" meta skuid {uids} meta l4proto tcp reject with tcp reset
    oifname "lo" meta skuid {uids} reject
    meta skuid {uids} tcp flags & (syn | ack) == syn | ack drop
    ip daddr 169.254.0.0/16 meta skuid {uids} meta l4proto tcp reject with tcp reset
    ip daddr 169.254.0.0/16 meta skuid {uids} reject
    ip6 daddr {METADATA_V6} meta skuid {uids} meta l4proto tcp reject with tcp reset
    ip6 daddr {METADATA_V6} meta skuid {uids} reject
  }}
  chain input {{
    type filter hook input priority filter; policy accept;
    iifname "{bridge}" ct state established,related accept
    iifname "{bridge}" tcp dport @open_ports accept
    iifname "{bridge}" meta l4proto tcp reject with tcp reset
    iifname "{bridge}" reject
  }}
  chain forward {{
    type filter hook forward priority filter; policy accept;
    iifname "{bridge}" ip daddr 169.254.0.0/16 reject
    iifname "{bridge}" ip6 daddr {METADATA_V6} reject
  }}
  set loopback_aliases {{ type ipv4_addr; }}
  chain prerouting {{
    type nat hook prerouting priority dstnat; policy accept;
    iifname "{bridge}" ip daddr @loopback_aliases tcp dport @open_ports dnat ip to 127.0.0.1
  }}
}}
""")
        for port in open_ports:
            self.open_port(port)

    def open_port(self, port: int) -> None:
        """Let the containers reach TCP ``port`` on this machine's addresses."""
        with self._lock:
            if port in self._open:
                return
            _nft(f"add element inet {self.table} open_ports {{ {int(port)} }}\n")
            self._open.add(port)

    def alias_loopback(self, address: str) -> None:
        """Let the Docker containers reach the open ports at ``address`` (their bridge's own, on this
        machine) as the local containers reach them at 127.0.0.1, where services such as the gateway
        listen (a container's 127.0.0.1 is itself)."""
        Path(f"/proc/sys/net/ipv4/conf/{self.bridge}/route_localnet").write_text("1\n")  # else 127/8 is martian there
        with self._lock:
            _nft(f"add element inet {self.table} loopback_aliases {{ {ipaddress.IPv4Address(address)} }}\n")

    def close(self) -> None:
        try:
            _nft(f"delete table inet {self.table}\n")
        except FirewallError as exc:
            log.warning("could not remove the firewall table %s: %s", self.table, exc)


def _delete_dead_tables() -> None:
    """Delete the tables of instances that died without deleting theirs (killed), unless a live
    instance holds their block again."""
    try:
        listed = subprocess.run(["nft", "list", "tables", "inet"], capture_output=True, text=True, timeout=30,
                                check=False)
    except FileNotFoundError:
        return  # the table's own creation says what is missing
    for line in listed.stdout.splitlines():
        name = line.removeprefix("table inet ").strip()
        first = name.removeprefix(TABLE_PREFIX)
        if name.startswith(TABLE_PREFIX) and first.isdigit() and not uid_block.held(int(first)):
            try:
                _nft(f"delete table inet {name}\n")
            except FirewallError as exc:  # another instance deleted it first
                log.info("the dead instance's firewall table %s: %s", name, exc)


def docker_bridge(first_uid: int) -> str:
    """The Linux bridge of the Docker network of the instance whose uid block starts at ``first_uid``."""
    return f"owxd{first_uid}"


def _nft(script: str) -> None:
    try:
        done = subprocess.run(["nft", "-f", "-"], input=script, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise FirewallError("nft is not installed (apt-get install -y nftables)") from None
    if done.returncode != 0:
        raise FirewallError(f"nft failed: {done.stderr.strip()}")
