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


def test_a_standalone_agent_looks_where_owx_up_with_the_same_data_dir_puts_its_containers(tmp_path, monkeypatch):
    """``owx agent`` beside ``owx up``: both derive the cgroup root from the data dir (the agent looked
    under ``owx``, where no ``owx up`` puts containers), and both take OWX_PLATFORM__CGROUP_ROOT."""
    from owx.escra_agent.settings import AgentSettings
    from owx.platform.settings import for_instance
    from owx.settings import Settings

    monkeypatch.delenv("OWX_PLATFORM__CGROUP_ROOT", raising=False)
    roots = []
    for name in ("one", "two"):
        monkeypatch.setenv("OWX_DATA_DIR", str(tmp_path / name))
        platform = for_instance(Settings().platform, Settings().data_dir)  # what owx up's platform runs with
        assert AgentSettings().cgroup_root == platform.cgroup_root
        roots.append(platform.cgroup_root)
    assert roots[0] != roots[1]
    monkeypatch.setenv("OWX_PLATFORM__CGROUP_ROOT", "owx-mine")
    assert AgentSettings().cgroup_root == "owx-mine"
    assert AgentSettings(cgroup_root="given").cgroup_root == "given"
