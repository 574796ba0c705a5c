"""Counter reads and limit writes through kept descriptors: fresh values, refusals, groups removed and
made again, no leak."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import uuid

import pytest

from owx.common.cgroups import Cgroup, CgroupError

MIB = 1 << 20
# waits for a line, then touches 40 MiB and says so
ALLOCATE = "import sys; sys.stdin.readline(); block = b'x' * (40 << 20); print('ok', flush=True); sys.stdin.read()"


@pytest.fixture
def group():
    made = Cgroup(f"owx-test-reads/{uuid.uuid4().hex[:8]}").create()
    yield made
    if made.exists():
        made.destroy()
    Cgroup("owx-test-reads").remove_if_empty()


def test_every_read_sees_the_value_of_now(group):
    reader = Cgroup(group.relpath)  # another object, as the Escra agent has: its descriptors stay open
    group.set_memory_limit(96 * MIB)
    assert reader.memory().limit == 96 * MIB
    group.set_memory_limit(64 * MIB)
    assert reader.memory().limit == 64 * MIB
    group.set_cpu_quota(30_000)
    assert reader.cpu_quota() == (30_000, 100_000)
    before, used_before = reader.memory_peak(), reader.cpu().usage_ns
    proc = subprocess.Popen([sys.executable, "-c", ALLOCATE], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        group.add(proc.pid)
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == b"ok\n"
        assert reader.memory().usage >= 40 * MIB
        assert reader.memory_peak() >= before + 40 * MIB
        assert reader.cpu().usage_ns > used_before
    finally:
        proc.kill()
        proc.wait()


def test_a_group_removed_and_made_again_is_read_afresh(group):
    reader = Cgroup(group.relpath)
    group.set_memory_limit(80 * MIB)
    assert reader.memory().limit == 80 * MIB
    group.destroy()  # the reader's open descriptors must not keep the group from going
    assert not group.exists()
    with pytest.raises(CgroupError):
        reader.oom_kills()
    group.create()
    group.set_memory_limit(48 * MIB)
    assert reader.memory().limit == 48 * MIB
    assert reader.oom_kills() == 0


def _open_on(group: Cgroup) -> int:
    """How many descriptors of this process are open on files of ``group`` (others open and close
    as they like while the suite runs)."""
    prefixes = tuple(f"{group.dir(controller)}/" for controller in ("memory", "cpu", "cpuacct", "pids"))
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith(prefixes)
        except OSError:  # closed meanwhile
            pass
    return count


def test_descriptors_are_kept_once_and_closed_with_the_group(group):
    for _ in range(100):
        group.memory()
        group.cpu()
    assert 0 < _open_on(group) <= 8  # one per counter file, however many reads
    group.destroy()
    assert _open_on(group) == 0


def test_limits_are_written_through_kept_descriptors(group):
    writer, reader = Cgroup(group.relpath), Cgroup(group.relpath)  # as Escra's agent writes, every tick
    for step in range(100):
        writer.set_memory_limit((64 + step % 2 * 32) * MIB)
        writer.set_cpu_quota(20_000 + step * 100)
    assert 3 <= _open_on(group) <= 5  # the limit (read and written), memory+swap, the quota and its period
    assert reader.memory().limit == 96 * MIB
    assert reader.cpu_quota() == (29_900, 100_000)
    writer.close_files()
    reader.close_files()
    assert _open_on(group) == 0


def test_a_refused_limit_raises_and_the_next_one_lands(group):
    writer = Cgroup(group.relpath)
    writer.set_cpu_quota(50_000)
    with pytest.raises(CgroupError) as refused:
        writer.set_cpu_quota(10)  # below the kernel's least quota (1 ms)
    assert refused.value.errno == errno.EINVAL
    writer.set_cpu_quota(40_000)
    assert Cgroup(group.relpath).cpu_quota() == (40_000, 100_000)


def test_a_group_removed_and_made_again_is_written_afresh(group):
    writer, reader = Cgroup(group.relpath), Cgroup(group.relpath)
    writer.set_memory_limit(80 * MIB)
    group.destroy()
    with pytest.raises(CgroupError):
        writer.set_memory_limit(72 * MIB)
    group.create()
    writer.set_memory_limit(48 * MIB)
    assert reader.memory().limit == 48 * MIB
