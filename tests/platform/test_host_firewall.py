"""The uid blocks that tell instances' containers apart, and the firewall that keeps each block's
sockets off this machine's services (real nftables, real sockets, real processes)."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys

import pytest
from tests.fixtures.sockets import listening

from owx.platform.embedded.host_firewall import HostFirewall
from owx.platform.embedded.uid_block import BLOCK_UIDS, UidBlock
from owx.platform.interface import PlatformUnavailable
from owx.platform.settings import SandboxSettings

HOLDER = '''import sys, time
from owx.platform.embedded.uid_block import UidBlock
from owx.platform.settings import SandboxSettings
block = UidBlock.lease(SandboxSettings(uid_base=int(sys.argv[1]), uid_count=int(sys.argv[2])))
print(block.first, flush=True)
time.sleep(600)
'''


@pytest.fixture
def two_blocks() -> SandboxSettings:
    """A uid range of its own with room for two blocks (no other test or instance uses it)."""
    return SandboxSettings(uid_base=50_000_000 + secrets.randbelow(1000) * 2 * BLOCK_UIDS, uid_count=2 * BLOCK_UIDS)


def test_live_instances_hold_disjoint_blocks_and_a_killed_ones_block_is_free_again(two_blocks):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(two_blocks.uid_base), str(two_blocks.uid_count)],
                              stdout=subprocess.PIPE, text=True)
    try:
        theirs = int(holder.stdout.readline())
        ours = UidBlock.lease(two_blocks)
        assert {theirs, ours.first} == {two_blocks.uid_base, two_blocks.uid_base + BLOCK_UIDS}
        with pytest.raises(PlatformUnavailable, match="held by a live owx instance"):
            UidBlock.lease(two_blocks)
        holder.send_signal(signal.SIGKILL)  # no clean-up of its own: the kernel drops its lock
        holder.wait()
        again = UidBlock.lease(two_blocks)
        assert again.first == theirs
        again.release()
        ours.release()
    finally:
        holder.kill()
        holder.wait()


def test_the_blocks_uids_reach_only_the_open_ports_of_this_machine(two_blocks):
    block = UidBlock.lease(two_blocks)
    services = [listening(socket.AF_INET, "127.0.0.1"), listening(socket.AF_INET6, "::1")]
    ports = [sock.getsockname()[1] for sock in services]
    HostFirewall(block)  # as a predecessor killed with its table in place left it ...
    firewall = HostFirewall(block, open_ports=[ports[0]])  # ... replaced, not stacked
    try:
        rules = subprocess.run(["nft", "list", "table", "inet", firewall.table], capture_output=True, text=True,
                               check=True).stdout
        assert rules.count("meta skuid") == 8, rules  # one table's rules, not two stacked
        assert _connect_as(block.first, "127.0.0.1", ports[0]) == "connected"
        assert _connect_as(block.last, "::1", ports[1]) == "ECONNREFUSED"
        assert _connect_as(block.last + 1, "::1", ports[1]) == "connected"  # not the block's: untouched
        firewall.open_port(ports[1])
        assert _connect_as(block.last, "::1", ports[1]) == "connected"
    finally:
        firewall.close()
        block.release()
        for sock in services:
            sock.close()
    listed = subprocess.run(["nft", "list", "table", "inet", firewall.table], capture_output=True, text=True)
    assert listed.returncode != 0  # closed: the table is gone


def _connect_as(uid: int, host: str, port: int) -> str:
    """What a process running as ``uid`` gets when it connects to ``host``:``port``."""
    code = f'''import errno, os, socket
os.setresgid({uid}, {uid}, {uid}); os.setresuid({uid}, {uid}, {uid})
sock = socket.socket(socket.AF_INET6 if ":" in {host!r} else socket.AF_INET)
sock.settimeout(10)
try:
    sock.connect(({host!r}, {port}))
    print("connected")
except OSError as exc:
    print(errno.errorcode.get(exc.errno, str(exc)))
'''
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PYTHONPATH": ""})
    return done.stdout.strip() or done.stderr


def _tables() -> set[str]:
    listed = subprocess.run(["nft", "list", "tables", "inet"], capture_output=True, text=True, check=True).stdout
    return {line.removeprefix("table inet ").strip() for line in listed.splitlines()}


def test_a_new_firewall_deletes_the_tables_of_dead_instances_and_keeps_live_ones():
    """A killed instance leaves its table; the next instance may take another block, so nothing
    would replace it. A new firewall deletes every table whose block no live instance holds."""
    three = SandboxSettings(uid_base=60_000_000 + secrets.randbelow(1000) * 3 * BLOCK_UIDS, uid_count=3 * BLOCK_UIDS)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(three.uid_base), str(three.uid_count)],
                              stdout=subprocess.PIPE, text=True)
    live = dead = ours = None
    try:
        live = HostFirewall(UidBlock(int(holder.stdout.readline()), BLOCK_UIDS, -1))  # the live holder's
        dead = HostFirewall(UidBlock(three.uid_base + 2 * BLOCK_UIDS, BLOCK_UIDS, -1))  # as a killed one left it
        block = UidBlock.lease(three)
        ours = HostFirewall(block)
        assert live.table in _tables() and ours.table in _tables()
        assert dead.table not in _tables()
        block.release()
    finally:
        holder.kill()
        holder.wait()
        for firewall in (live, ours):
            if firewall is not None:
                firewall.close()
