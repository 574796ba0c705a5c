"""The agent's discovery of embedded-platform containers, on real cgroups."""

from __future__ import annotations

from owx.common.cgroups import Cgroup
from owx.escra_agent.discovery import EmbeddedDiscovery


def test_each_scan_shows_the_groups_there_now_and_nothing_else(cgroup_root):
    node = Cgroup(f"{cgroup_root}/n1").create()
    first, second = (Cgroup(f"{node.relpath}/{name}").create() for name in ("owx-a1", "owx-b2"))
    Cgroup(f"{node.relpath}/_not-a-container").create()  # not a container id: never managed
    discovery = EmbeddedDiscovery(cgroup_root, "n1", "app")

    found = discovery.scan()
    assert set(found) == {"owx-a1", "owx-b2"}
    assert found["owx-a1"].cgroup.dir() == first.dir() and found["owx-a1"].app == "app"

    found["docker-c3"] = found.pop("owx-a1")  # the agent adds Docker's containers to what a scan gives
    second.destroy()
    Cgroup(f"{node.relpath}/owx-c3").create()
    again = discovery.scan()
    assert set(again) == {"owx-a1", "owx-c3"}
    assert again["owx-c3"].cgroup.dir() == Cgroup(f"{node.relpath}/owx-c3").dir()
    first.destroy()
    assert set(discovery.scan()) == {"owx-c3"}
