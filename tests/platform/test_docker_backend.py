"""The same pool over Docker containers (starts dockerd and builds the runtime image when missing)."""

from __future__ import annotations

import io
import logging
import os
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest
from platform_helpers import ECHO, OnDeath, request, spec
from tests.fixtures.polling import wait_for
from tests.fixtures.sockets import listening

from owx.common.cgroups import Cgroup
from owx.common.dockerd import engine_pid, ensure_dockerd
from owx.platform.embedded.container import IMAGE_PULL_ERROR
from owx.platform.embedded.container_limits import MB, cpu_shares
from owx.platform.types import (
    DEVELOPER_ERROR,
    INIT_EXITED_MESSAGE,
    INIT_TIMEOUT_MESSAGE,
    OOM_MESSAGE,
    SUCCESS,
    TIMEOUT_MESSAGE,
    ContainerDeath,
)
from owx.runtimes.image.build import PYTHON_IMAGE, ensure_image

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def docker_client():
    client = ensure_dockerd()
    ensure_image(PYTHON_IMAGE, client=client)
    yield client
    client.close()


@pytest.fixture
def docker_platform(make_platform, docker_client):
    return make_platform(kind="docker", user_memory_mb=1024, user_cpus=2.0)


def test_run_reuse_logs_and_limits_in_docker_inspect(docker_platform, docker_client):
    action = spec(ECHO, memory_mb=256)
    first = docker_platform.run(action, request(n=1))
    second = docker_platform.run(action, request(n=2))
    assert first.status == SUCCESS and first.result == {"echo": {"n": 1}}
    assert second.container_id == first.container_id and second.init_ms is None
    assert [line.split(" ", 1)[1] for line in second.logs] == ["stdout: echo {'n': 2}"]
    attrs = docker_client.api.inspect_container(first.container_id)
    host = attrs["HostConfig"]
    assert host["Memory"] == host["MemorySwap"] == 256 * MB
    assert host["CpuShares"] == cpu_shares(256, 1024) == 256
    assert host["CpuPeriod"] == 100_000 and host["CpuQuota"] == 50_000  # 2 CPUs * 256/1024
    assert host["NanoCpus"] == 0  # so Escra can still update quota/period
    assert host["CgroupParent"] == "/owx-test-platform/node0"
    assert attrs["Config"]["Labels"]["owx.node"] == "node0"
    assert attrs["Config"]["Labels"]["owx.action"] == action.key
    (info,) = docker_platform.containers()
    assert Cgroup(info.cgroup).memory().limit == 256 * MB  # the cgroup the Escra agent reads


def test_timeout_and_oom_in_docker(docker_platform, docker_client):
    slow = spec("import time\ndef main(args):\n    time.sleep(30)\n", timeout_ms=500)
    timed_out = docker_platform.run(slow, request())
    assert timed_out.status == DEVELOPER_ERROR and timed_out.result == {"error": TIMEOUT_MESSAGE.format(ms=500)}
    hog = spec("def main(args):\n    b = [bytearray(16 * 2**20) for _ in range(40)]\n    return {}\n", memory_mb=128)
    oom = docker_platform.run(hog, request())
    assert oom.status == DEVELOPER_ERROR and oom.result == {"error": OOM_MESSAGE}
    def removed() -> bool:
        ids = {timed_out.container_id, oom.container_id}
        return not any(c.id in ids for c in docker_client.containers.list(all=True))

    wait_for(removed, what="the failed containers to be removed")


def test_docker_container_death_is_reported_fast(docker_platform):
    deaths: list[ContainerDeath] = []
    arrived = threading.Event()
    docker_platform.subscribe(OnDeath(lambda death: (deaths.append(death), arrived.set())))
    outcome = docker_platform.run(spec(ECHO), request())
    (info,) = docker_platform.containers()
    os.kill(info.pid, signal.SIGKILL)
    assert arrived.wait(5)  # from docker's event, long before any timeout
    assert deaths[0].container_id == outcome.container_id and deaths[0].reason == "exited"
    wait_for(lambda: docker_platform.containers() == [], what="the dead container to leave the pool")


CONFINED = '''
import errno, json, os, socket, urllib.request, urllib.error

def main(args):
    caps = [line.split()[1] for line in open("/proc/self/status") if line.startswith("CapEff")][0]
    try:
        open("/etc/owned", "w").write("x")
        etc = "written"
    except OSError as exc:
        etc = errno.errorcode[exc.errno]
    seen = {"uid": os.getuid(), "caps": caps, "etc": etc}
    if args.get("victim"):
        body = json.dumps({"value": {}}).encode()
        try:
            answer = urllib.request.urlopen(urllib.request.Request(args["victim"], data=body), timeout=5)
            seen["stranger"] = answer.status
        except urllib.error.HTTPError as exc:
            seen["stranger"] = exc.code
        except OSError as exc:
            seen["stranger"] = "unreachable: %s" % exc
    for name, (host, port) in args.get("services", {}).items():
        sock = socket.socket()
        sock.settimeout(5)
        try:
            sock.connect((host, port))
            seen[name] = "connected"
        except OSError as exc:
            seen[name] = errno.errorcode.get(exc.errno, str(exc))
    return seen
'''


def test_docker_containers_are_confined_and_serve_their_platform_only(docker_platform, docker_client):
    victim = docker_platform.run(spec(CONFINED), request())
    assert victim.status == SUCCESS, victim.result
    assert victim.result["uid"] >= 65536 and int(victim.result["caps"], 16) == 0 and victim.result["etc"] == "EROFS"
    host = docker_client.api.inspect_container(victim.container_id)["HostConfig"]
    assert host["CapDrop"] == ["ALL"] and host["ReadonlyRootfs"] and "no-new-privileges" in host["SecurityOpt"]
    network = docker_client.api.inspect_container(victim.container_id)["NetworkSettings"]["Networks"]
    (address,) = [attached["IPAddress"] for attached in network.values()]
    attacker = docker_platform.run(spec(CONFINED), request(victim=f"http://{address}:8080/run"))
    assert attacker.status == SUCCESS, attacker.result
    assert attacker.result["stranger"].startswith("unreachable"), attacker.result  # no container reaches another


def test_docker_containers_reach_only_the_open_ports_of_this_machine(docker_platform, docker_client):
    closed, opened = listening(socket.AF_INET, "0.0.0.0"), listening(socket.AF_INET, "0.0.0.0")
    docker_platform.open_host_port(opened.getsockname()[1])
    first = docker_platform.run(spec(CONFINED), request())
    (network,) = docker_client.api.inspect_container(first.container_id)["NetworkSettings"]["Networks"]
    host = docker_client.api.inspect_network(network)["IPAM"]["Config"][0]["Gateway"]  # this machine, on it
    services = {"closed": [host, closed.getsockname()[1]], "opened": [host, opened.getsockname()[1]]}
    outcome = docker_platform.run(spec(CONFINED), request(services=services))
    assert outcome.status == SUCCESS, outcome.result
    assert outcome.result["closed"] == "ECONNREFUSED" and outcome.result["opened"] == "connected", outcome.result
    closed.close()
    opened.close()


def test_closing_leaves_no_cgroup_in_any_hierarchy(docker_platform):
    """Docker makes a container's cgroup parent in every v1 hierarchy (freezer, devices, blkio, ...),
    not only in the controllers owx uses: closing removes them all."""
    assert docker_platform.run(spec(ECHO), request()).status == SUCCESS
    made = [path for path in Path("/sys/fs/cgroup").glob("*/owx-test-platform") if path.is_dir()]
    assert any(path.parent.name == "freezer" for path in made), made
    docker_platform.close()
    assert [path for path in made if path.is_dir()] == []


def test_what_an_action_prints_is_kept_nowhere_but_in_its_record(docker_platform, docker_client):
    """Docker keeps no copy of the output (its json-file log is unbounded): 20 MB printed leave the
    record's lines, cut at the limit, and no file of Docker's."""
    flood = spec("def main(args):\n    for _ in range(20_000):\n        print('x' * 1023)\n    return {}\n")
    outcome = docker_platform.run(flood, request())
    assert outcome.status == SUCCESS and outcome.logs
    attrs = docker_client.api.inspect_container(outcome.container_id)
    assert attrs["HostConfig"]["LogConfig"]["Type"] == "none"
    assert not attrs["LogPath"] or not Path(attrs["LogPath"]).exists()


def test_a_volume_the_image_declares_is_a_bounded_tmpfs(docker_platform, docker_client):
    """A blackbox image may declare a VOLUME: it is a tmpfs as /tmp is (charged to the container's
    memory), not a directory on the host's disk that outlives the container."""
    image = "owx-test/declares-a-volume:1"
    dockerfile = f"FROM {PYTHON_IMAGE}\nUSER root\nRUN mkdir -m 1777 /data\nVOLUME /data\n"
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=image, rm=True)
    volumes_before = {v.name for v in docker_client.volumes.list()}
    code = ("def main(args):\n"
            "    mounts = [line.split() for line in open('/proc/mounts')]\n"
            "    return {'fs': [m[2] for m in mounts if m[1] == '/data']}\n")
    try:
        outcome = docker_platform.run(spec(code, kind="blackbox", image=image), request())
        assert outcome.status == SUCCESS and outcome.result == {"fs": ["tmpfs"]}, outcome.result
        mounts = docker_client.api.inspect_container(outcome.container_id)["Mounts"]
        assert [m for m in mounts if m["Type"] == "volume"] == []
        assert {v.name for v in docker_client.volumes.list()} == volumes_before
    finally:
        docker_platform.close()
        docker_client.images.remove(image, force=True)


def _import_image(client, reference: str) -> None:
    """An image not built from owx's runtime: one file, no command (as a database's or a tool's is to owx)."""
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        secret = b"the operator's\n"
        entry = tarfile.TarInfo("etc/secret")
        entry.size = len(secret)
        tar.addfile(entry, io.BytesIO(secret))
    repository, tag = reference.rsplit(":", 1)
    client.api.import_image_from_data(archive.getvalue(), repository=repository, tag=tag)


def test_a_blackbox_action_runs_only_runtimes_and_the_images_the_operator_lists(make_platform, docker_client):
    """An image of the machine that is not a runtime owx built (or one built from it) and that the
    operator did not list is a failed pull to the tenant, as an image no registry has: nothing of it
    runs, and its existence is not told apart from a missing image's."""
    listed, unlisted, aliased = "owx-test/listed-tool:1", "owx-test/private-tool:1", "registry.example/org/tool:2"
    for image in (listed, unlisted):
        _import_image(docker_client, image)
    platform = make_platform(kind="docker", blackbox_images=["owx-test/listed-*"])
    try:
        refused = platform.run(spec(ECHO, kind="blackbox", image=unlisted), request())
        assert refused.status == DEVELOPER_ERROR and refused.result == {"error": IMAGE_PULL_ERROR.format(image=unlisted)}
        assert docker_client.api.containers(all=True, filters={"ancestor": unlisted}) == []
        tried = platform.run(spec(ECHO, kind="blackbox", image=listed), request())  # listed: dockerd has its say
        assert tried.result["error"].startswith(f"Failed to start a container of image '{listed}'"), tried.result
        runtime = platform.run(spec(ECHO, kind="blackbox", image=PYTHON_IMAGE), request(n=1))
        assert runtime.status == SUCCESS and runtime.result == {"echo": {"n": 1}}
        offer = subprocess.run([sys.executable, "-m", "owx.cli", "runtime", "alias", aliased, "--to", unlisted],
                               capture_output=True, text=True, timeout=120)
        assert offer.returncode == 0, offer.stderr
        tried = platform.run(spec(ECHO, kind="blackbox", image=aliased), request())  # the operator's alias offers it
        assert tried.result["error"].startswith(f"Failed to start a container of image '{aliased}'"), tried.result
        assert platform.run(spec(ECHO, kind="blackbox", image=unlisted), request()).result == refused.result
    finally:
        platform.close()
        for image in (listed, unlisted, aliased):
            docker_client.images.remove(image, force=True)


@pytest.mark.parametrize("dockerfile, errors", [
    # ended before owx looked, or just after: either way the action's
    ('CMD ["true"]', ("Failed to start a container of image '{image}': its command ended at once",
                      INIT_EXITED_MESSAGE)),
    ('CMD ["/no/such/program"]', ("Failed to start a container of image '{image}': ",)),
])
def test_an_image_that_cannot_start_is_the_actions_failure(docker_platform, docker_client, dockerfile, errors):
    """A blackbox image whose command ends at once, or is not there, fails its activation as a
    developer error naming the image, as OpenWhisk's BlackboxStartupError does, and at once."""
    image = "owx-test/cannot-start:1"
    docker_client.images.build(fileobj=io.BytesIO(f"FROM {PYTHON_IMAGE}\n{dockerfile}\n".encode()), tag=image, rm=True)
    try:
        started = time.monotonic()
        outcome = docker_platform.run(spec(ECHO, kind="blackbox", image=image), request())
        assert outcome.status == DEVELOPER_ERROR, outcome.result
        assert outcome.result["error"].startswith(tuple(e.format(image=image) for e in errors)), outcome.result
        assert time.monotonic() - started < 4.0
    finally:
        docker_platform.close()
        docker_client.images.remove(image, force=True)


def test_an_image_that_never_listens_times_out_its_initialization(docker_platform, docker_client):
    """A runtime that never listens is OpenWhisk's init timeout at the action's time limit, not an
    exit that did not happen."""
    image = "owx-test/never-listens:1"
    docker_client.images.build(fileobj=io.BytesIO(f'FROM {PYTHON_IMAGE}\nCMD ["sleep", "600"]\n'.encode()),
                               tag=image, rm=True)
    try:
        started = time.monotonic()
        outcome = docker_platform.run(spec(ECHO, kind="blackbox", image=image, timeout_ms=1500), request())
        assert outcome.status == DEVELOPER_ERROR
        assert outcome.result == {"error": INIT_TIMEOUT_MESSAGE.format(ms=1500)}
        assert time.monotonic() - started < 5.0
    finally:
        docker_platform.close()
        docker_client.images.remove(image, force=True)


def test_containers_dockerd_could_not_remove_are_removed_at_the_next_start(make_platform, docker_client, tmp_path,
                                                                           caplog):
    """dockerd going away mid-life fails no listener and no close: a container it could not remove
    keeps its uid (it may live on), and the instance's Docker backend removes it when it next starts."""
    state = tmp_path / "state"
    platform = make_platform(kind="docker", state_dir=state)
    outcome = platform.run(spec(ECHO), request())
    assert outcome.status == SUCCESS
    engine = engine_pid()
    assert engine is not None
    stopped = tmp_path / "stopped.pid"  # the engine removes its own pid file as it stops
    stopped.write_text(str(engine))
    try:
        os.kill(engine, signal.SIGTERM)  # it stops its containers as it goes
        wait_for(lambda: platform.containers() == [], timeout=60, what="the container's death to be heard")
        platform.close()
    finally:
        wait_for(lambda: engine_pid(stopped) is None, timeout=60, what="the engine to stop")
        client = ensure_dockerd(timeout=60)
    assert [c.id for c in client.containers.list(all=True) if c.id == outcome.container_id]  # left behind
    assert make_platform(kind="docker", state_dir=state).run(spec(ECHO), request()).status == SUCCESS
    assert not [c.id for c in client.containers.list(all=True) if c.id == outcome.container_id]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
