"""Crash safety and independent instances: what a killed gateway left is reaped by the next start
(and by nobody else), and two instances on one host never touch each other's containers."""

from __future__ import annotations

import secrets
import threading
import time
from pathlib import Path

from isolation_support import host_pids_with, start_instance
from tests.fixtures.polling import wait_for

from owx.common.cgroups import Cgroup
from owx.platform.settings import PlatformSettings, for_instance

SLEEP = ("import subprocess\ndef main(args):\n    subprocess.run(['/usr/bin/sleep', args['marker']])\n"
         "    return {'slept': True}\n")
MB = 1024 * 1024


def containers(root: str) -> list[Cgroup]:
    return [group for node in Cgroup(root).children() for group in node.children()]


def sleep_in(tenant, seconds: int) -> tuple[str, list[dict]]:
    """Start a blocking activation that sleeps; its marker (seen in the host's process list) and record."""
    marker = f"{seconds}.{secrets.randbelow(10**6):06d}"
    name = tenant.put(SLEEP, limits={"memory": 256})
    records: list[dict] = []

    def invoke() -> None:
        try:
            records.append(tenant.invoke(name, marker=marker))
        except Exception as exc:  # noqa: BLE001 - the gateway may be killed under it
            records.append({"error": str(exc)})

    threading.Thread(target=invoke, daemon=True).start()
    wait_for(lambda: host_pids_with(marker), timeout=60, what=f"activation {marker}")
    return marker, records


def test_what_a_killed_gateway_left_is_reaped_by_the_next_start(tmp_path):
    instance = start_instance(tmp_path / "crash")
    try:
        markers = [sleep_in(tenant, 120)[0] for tenant in (instance.victim, instance.attacker)]
        left = containers(instance.cgroup_root)
        processes = [pid for group in left for pid in group.pids()]
        assert len(left) >= 3 and processes  # two busy containers and a stem cell
        instance.gateway.kill()
        # Each container's pid 1 loses the platform's socket and kills its namespace at once ...
        wait_for(lambda: not any(host_pids_with(marker) for marker in markers), what="the orphans to die")
        wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in processes), what="every process")
        assert all(group.exists() for group in left)  # ... but nobody removes their groups: the next start does
        restarted = instance.gateway.restart()
        instance.gateway = restarted
        assert not any(group.exists() for group in left)
        assert instance.victim.run("def main(args):\n    return {'back': True}\n") == {"back": True}
    finally:
        instance.gateway.stop()


def test_two_instances_never_touch_each_others_containers(tmp_path):
    derived = {"OWX_PLATFORM__CGROUP_ROOT": ""}  # each instance's root comes from its data dir
    quiet = start_instance(tmp_path / "quiet", **derived)
    try:
        marker, records = sleep_in(quiet.victim, 40)
        escra = start_instance(tmp_path / "escra", OWX_ESCRA__ENABLED="true", **derived)  # reaps at start ...
        try:
            roots = [for_instance(PlatformSettings(), inst.gateway.data_dir).cgroup_root for inst in (quiet, escra)]
            assert roots[0] != roots[1]
            assert host_pids_with(marker)  # ... its own predecessors only: the other's activation runs on
            sleep_in(escra.victim, 40)
            busy = next(group for group in containers(roots[1]) if len(group.pids()) > 1)  # runtime + sleep
            wait_for(lambda: busy.memory().limit < 256 * MB, timeout=40, what="Escra to reclaim its own slack")
            others = [group for group in containers(roots[0]) if len(group.pids()) > 1]
            assert others and all(group.memory().limit == 256 * MB for group in others)
            time.sleep(6)  # one more reclaim period of the Escra instance
            assert all(group.memory().limit == 256 * MB for group in others)
        finally:
            escra.gateway.stop()
        wait_for(lambda: bool(records), timeout=60, what="the quiet instance's activation")
        assert records[0].get("response", {}).get("success"), records
    finally:
        quiet.gateway.stop()
