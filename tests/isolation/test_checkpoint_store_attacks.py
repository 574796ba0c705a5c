"""Attacks through a namespace's own Canary checkpoint store, which its actions write and the gateway
reads: nothing an action puts there may run in the gateway, or make root touch what a link names.

Each attack is a real Canary action of ``mallory`` on a real ``owx up``; the victims are host files
and directories only root may write.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from isolation_support import host_pids_with, start_instance

CANARY = [{"key": "canary", "value": {"checkpoint": "explicit"}}]
PLANT = '''
import os, pickle, sqlite3
from urllib.parse import urlsplit

SCHEMA = "CREATE TABLE IF NOT EXISTS checkpoint_kv (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID"

def store():
    """The path of the namespace's store directory and a connection to its database."""
    database = urlsplit(os.environ["__OW_CANARY_STORE"]).path
    connection = sqlite3.connect(database, isolation_level=None)
    connection.execute(SCHEMA)
    return os.path.dirname(database), connection
'''
FORGE = PLANT + '''
class Payload:
    def __reduce__(self):
        return (os.system, ("touch " + MARKER,))

def main(args):
    global MARKER
    MARKER = args["marker"]
    function_id = os.environ["__OW_CANARY_FUNCTION_ID"]
    _, db = store()
    for key in ("index/" + function_id, "ckpt/" + function_id + "/1"):
        db.execute("INSERT OR REPLACE INTO checkpoint_kv VALUES (?, ?)", (key, pickle.dumps(Payload())))
    db.execute("INSERT OR REPLACE INTO checkpoint_kv VALUES (?, CAST('1' AS BLOB))", ("seq/" + function_id,))
    return {"planted": True}
'''
LINK_SPOOL = PLANT + '''
from owx.canary.checkpoint.files import function_dir

def main(args):
    function_id = os.environ["__OW_CANARY_FUNCTION_ID"]
    directory, db = store()
    os.symlink(args["victim"], os.path.join(directory, "blobs", ".spool", function_dir(function_id)))
    db.execute("INSERT OR REPLACE INTO checkpoint_kv VALUES (?, CAST('5' AS BLOB))", ("seq/" + function_id,))
    return {"planted": True}
'''
LINK_STORE = PLANT + '''
def main(args):
    directory, db = store()
    db.close()
    os.rename(os.path.join(directory, "blobs"), os.path.join(directory, "blobs.old"))
    os.symlink(args["directory"], os.path.join(directory, "blobs"))
    for suffix in ("", "-wal", "-shm"):
        database = os.path.join(directory, "checkpoints.db" + suffix)
        if os.path.exists(database):
            os.rename(database, database + ".old")
    os.symlink(args["file"], os.path.join(directory, "checkpoints.db"))
    os.symlink(args["file"], os.path.join(directory, "checkpoints.db-wal"))
    return {"planted": True}
'''
HELLO = "def main(args):\n    return {'hello': True}\n"
FILL = '''
import errno, os
from urllib.parse import urlsplit

def main(args):
    directory = os.path.dirname(urlsplit(os.environ["__OW_CANARY_STORE"]).path)
    written = 0
    try:
        with open(os.path.join(directory, "junk"), "wb") as junk:
            for _ in range(args["mb"]):
                junk.write(b"x" * (1024 * 1024))
                junk.flush()
                written += 1
            os.fsync(junk.fileno())
    except OSError as exc:
        return {"written_mb": written, "refused": errno.errorcode.get(exc.errno, str(exc.errno))}
    return {"written_mb": written, "refused": None}
'''


@pytest.fixture(scope="module")
def instance(tmp_path_factory):
    running = start_instance(tmp_path_factory.mktemp("store-attacks"), OWX_PLATFORM__SANDBOX__NAMESPACE_DIR_MB="64")
    yield running
    running.gateway.stop()


def root_only_directory(path):
    """A host directory of root's, readable by all, writable by root alone, with files in it."""
    path.mkdir(mode=0o755)
    os.chmod(path, 0o755)
    for name in ("000000000003.seg", "stale.tmp", "other.txt"):
        (path / name).write_text("root's")
        os.chmod(path / name, 0o644)
    os.utime(path / "stale.tmp", (0, 0))  # older than any writer still at work
    return path


def test_a_checkpoint_index_an_action_forges_runs_nothing_in_the_gateway(instance, tmp_path):
    """The gateway reads a Canary function's index and records after each run: a pickle planted there
    would run as root in the gateway."""
    marker = tmp_path / "ran-as-root"
    record = instance.attacker.invoke(instance.attacker.put(FORGE, annotations=CANARY), marker=str(marker))
    assert record["response"]["success"], record["response"]
    assert not marker.exists()


def test_a_link_in_the_spool_makes_no_host_file_deleted(instance, tmp_path):
    """After a Canary function succeeds its checkpoints are deleted, spool files included: a spool
    directory that is a link to a host directory must not have root delete segment-named files there."""
    victim = root_only_directory(tmp_path / "victim")
    record = instance.attacker.invoke(instance.attacker.put(LINK_SPOOL, annotations=CANARY), victim=str(victim))
    assert record["response"]["success"], record["response"]
    assert sorted(os.listdir(victim)) == ["000000000003.seg", "other.txt", "stale.tmp"]


def test_links_in_the_store_make_root_change_no_host_file(instance, tmp_path):
    """The store's directories are made again when a gateway starts: links an action left in their
    place (to a host directory, and for the database and its WAL to a host file) must not have root
    chmod, fill or write what they name."""
    directory = root_only_directory(tmp_path / "directory")
    victim = tmp_path / "file"
    victim.write_text("root's file\n")
    os.chmod(victim, 0o644)
    planted = instance.attacker.invoke(instance.attacker.put(LINK_STORE, annotations=CANARY),
                                       directory=str(directory), file=str(victim))
    assert planted["response"]["success"], planted
    instance.gateway.stop()
    instance.gateway.restart()
    instance.attacker.invoke(instance.attacker.put(HELLO, annotations=CANARY))  # the store is made ready again
    assert stat.S_IMODE(directory.stat().st_mode) == 0o755 and directory.stat().st_uid == 0
    assert sorted(os.listdir(directory)) == ["000000000003.seg", "other.txt", "stale.tmp"]
    assert stat.S_IMODE(victim.stat().st_mode) == 0o644 and victim.read_text() == "root's file\n"


def test_a_namespace_fills_its_own_volume_not_the_disk_everyone_shares(instance):
    """The namespace's directory is writable by its actions: on the data dir's disk, one of them wrote
    2 GiB in 3 s, and a full disk fails every tenant's activation log. It is a volume of its own
    (64 MB here, a sparse image on the data dir's disk): past it the action gets ENOSPC, and of the 200 MB
    it tried to write the disk took 64 at most."""
    free_before = shutil.disk_usage(instance.gateway.data_dir).free
    record = instance.attacker.invoke(instance.attacker.put(FILL, annotations=CANARY), mb=200)
    assert record["response"]["success"], record["response"]
    result = record["response"]["result"]
    assert result["refused"] == "ENOSPC" and result["written_mb"] < 64, result
    assert free_before - shutil.disk_usage(instance.gateway.data_dir).free < 80 * 1024 * 1024  # its 64 MB at most
    gids = json.loads((instance.state_dir / "namespaces.json").read_text())
    assert os.path.ismount(instance.state_dir / "namespaces" / str(gids["mallory"]))


def test_the_store_worker_has_the_namespaces_rights_alone_and_bounded_memory(instance):
    """It reads what the namespace's actions wrote: never as root, never with a capability, and, running
    outside the containers' cgroups, within an address space of its own (a huge index fails it alone)."""
    assert instance.victim.invoke(instance.victim.put(HELLO, annotations=CANARY))["response"]["success"]
    gids = json.loads((instance.state_dir / "namespaces.json").read_text())
    workers = [pid for pid in host_pids_with("owx.canary.store_worker")
               if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[-2] == str(gids["guest"]).encode()]
    assert len(workers) == 1, workers
    status = dict(line.split(":\t", 1) for line in Path(f"/proc/{workers[0]}/status").read_text().splitlines()
                  if ":\t" in line)
    assert status["Uid"].split()[0] != "0" and status["Gid"].split()[0] == str(gids["guest"])
    assert status["Groups"].strip() == "" and int(status["CapEff"], 16) == 0
    limits = Path(f"/proc/{workers[0]}/limits").read_text()
    assert f"Max address space         {2 * 1024 ** 3}" in limits.replace("  bytes", "")


WHOSE = '''
import os
from urllib.parse import urlsplit

def main(args):
    store = os.path.dirname(urlsplit(os.environ["__OW_CANARY_STORE"]).path)
    return {"gid": os.getgid(), "store_gid": os.stat(store).st_gid}
'''


SNOOP = """
import os

def main(args):
    seen = {}
    for path in args["paths"]:
        try:
            seen[path] = sorted(os.listdir(path))
        except OSError as exc:
            seen[path] = type(exc).__name__
    return {"store": os.environ.get("__OW_CANARY_STORE"), "seen": seen}
"""


def test_a_published_canary_action_another_tenant_runs_gets_nothing_of_the_callers_store(instance):
    """The published action's code is its owner's: run by another tenant (through a binding), it gets
    neither the caller's checkpoint store login nor the caller's namespace directory (a probe's owner
    read the caller's other checkpoints and filled its store quota with them, for good); it runs
    without checkpoints. Its run is still the caller's: its container, Canary rows and counters (the
    owner never sees the caller's activation ids or commits)."""
    owner, caller = instance.attacker, instance.victim
    assert caller.invoke(caller.put(WHOSE, annotations=CANARY))["response"]["success"]  # the caller's own state
    gids = json.loads((instance.state_dir / "namespaces.json").read_text())
    callers_directory = str(instance.state_dir / "namespaces" / str(gids[caller.namespace]))
    assert os.listdir(callers_directory)
    made = owner.session().put(f"{owner.gateway.url}/api/v1/namespaces/_/packages/shared",
                               params={"overwrite": "true"}, json={"publish": True}, timeout=30)
    assert made.status_code == 200, made.text
    owner.put(SNOOP, name="shared/snoop", annotations=CANARY)
    bound = caller.session().put(f"{caller.gateway.url}/api/v1/namespaces/_/packages/bound",
                                 params={"overwrite": "true"},
                                 json={"binding": {"namespace": owner.namespace, "name": "shared"}}, timeout=30)
    assert bound.status_code == 200, bound.text

    def commits(tenant):
        overview = tenant.session().get(f"{tenant.gateway.url}/api/v1/namespaces/_/canary", timeout=30)
        assert overview.status_code == 200, overview.text
        return overview.json()["stats"]["commits"]

    owners_before, callers_before = commits(owner), commits(caller)
    record = caller.invoke("bound/snoop", paths=[callers_directory, str(Path(callers_directory).parent)])
    assert record["response"]["success"], record["response"]
    result = record["response"]["result"]
    assert result["store"] is None
    assert result["seen"][callers_directory] == "FileNotFoundError", result
    assert (commits(owner), commits(caller)) == (owners_before, callers_before + 1)

    def job_ids(tenant):
        rows = tenant.session().get(f"{tenant.gateway.url}/api/v1/namespaces/_/canary/job_info",
                                    params={"limit": 200}, timeout=30)
        assert rows.status_code == 200, rows.text
        return {row["job_id"] for row in rows.json()}

    assert record["activationId"] in job_ids(caller)
    assert record["activationId"] not in job_ids(owner)
