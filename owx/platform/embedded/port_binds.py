"""No port of this machine bound by a local container: a cgroup BPF program refuses their binds.

Local containers share the host's network namespace, so a port an action binds is a port of this
machine: a UDP one would take the datagrams host processes send to it (a metrics or log daemon
that is down), a TCP one the connections of a service that is down. Landlock refuses TCP binds
only, and only from Linux 6.7. The program here runs on every ``bind`` of an IPv4 or IPv6 socket
(TCP, UDP or any other) by a process in a container's group, and refuses one that names a port
(EPERM); port 0, which lets the kernel pick an ephemeral one as a client's first send does, is let
through, and a socket bound so answers no connection (the host firewall drops its SYN-ACKs).

Cgroup BPF programs attach to the v2 hierarchy: on v2 the container's group, on a v1 system the
group of the same path in the ``unified`` mount beside the controllers, which the container joins
too (:meth:`owx.common.cgroups.Cgroup.dirs`). Unix sockets are not affected (the runtime's, and an
action's own in /tmp); abstract Unix socket names are (see
:mod:`owx.platform.embedded.host_firewall`).
"""

from __future__ import annotations

import logging
import os

from owx.common import bpf
from owx.common.cgroups import Cgroup, unified_root

log = logging.getLogger(__name__)

USER_PORT_OFFSET = 24  # struct bpf_sock_addr: user_family, user_ip4, user_ip6[4], then user_port
ATTACH_TYPES = (bpf.ATTACH_CGROUP_INET4_BIND, bpf.ATTACH_CGROUP_INET6_BIND)
# r0 = port asked for; port 0: allow (1); any other: refuse (0, the caller's bind fails with EPERM).
PROGRAM = b"".join([
    bpf.insn(bpf.LDX_W, dst=0, src=1, off=USER_PORT_OFFSET),
    bpf.insn(bpf.JEQ_IMM, dst=0, off=2, imm=0),
    bpf.insn(bpf.MOV64_IMM, dst=0, imm=0),
    bpf.insn(bpf.EXIT),
    bpf.insn(bpf.MOV64_IMM, dst=0, imm=1),
    bpf.insn(bpf.EXIT),
])


class PortBindFilter:
    """The loaded program (one per address family), attached to each local container's group."""

    def __init__(self) -> None:
        self._programs: dict[int, int] = {}  # attach type -> program descriptor
        try:
            for attach_type in ATTACH_TYPES:
                self._programs[attach_type] = bpf.load(bpf.PROG_TYPE_CGROUP_SOCK_ADDR, attach_type, PROGRAM,
                                                       "owx_port_binds")
        except BaseException:
            self.close()
            raise

    @classmethod
    def load_or_warn(cls) -> PortBindFilter | None:
        """The filter, or None where this machine runs none (logged: actions can then bind UDP ports)."""
        try:
            if unified_root() is None:
                raise OSError(0, "no cgroup v2 hierarchy is mounted")
            return cls()
        except OSError as exc:
            log.warning("no port bind filter (%s): actions can bind UDP ports of this machine, and TCP ports "
                        "where Landlock does not refuse it", exc)
            return None

    def apply(self, group: Cgroup) -> None:
        """Refuse port binds to the processes of ``group`` (made, not yet joined by any process)."""
        for attach_type, program in self._programs.items():
            bpf.attach_to_cgroup(program, group.unified_dir(), attach_type)

    def close(self) -> None:
        """Close the programs' descriptors; the attached ones stay with their groups."""
        for program in self._programs.values():
            os.close(program)
        self._programs.clear()
