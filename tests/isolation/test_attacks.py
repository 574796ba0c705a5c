"""Attacks run as real actions of one tenant (``mallory``) on a real ``owx up``; each must be refused.

The victim is the default namespace (``guest``). Every attack returns what it tried and what the
kernel answered (an errno name, or what it got); the test asserts the answer is a refusal, and,
where it matters, that the victim and the gateway carry on unharmed.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import secrets
import socket
import stat
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
import pytest

from isolation_support import PIDS_MAX, SMALL_TMP_MB, Tenant, add_tenant, host_pids_with
from tests.fixtures.polling import wait_for
from tests.fixtures.sockets import listening

import owx
from owx.common.cgroups import Cgroup
from owx.thorn import netns

REFUSED = {"ENOENT", "EACCES", "EPERM", "EROFS", "ESRCH", "ECONNREFUSED", "ENOTDIR"}

ATTEMPT = '''
import ctypes, errno, json, os, signal, socket, subprocess, sys, time

def attempt(fn):
    try:
        result = fn()
        return "done" if result is None else result
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))

def read(path):
    with open(path, "rb") as handle:
        return "read %d bytes" % len(handle.read())

def write(path, data=b"owned"):
    with open(path, "wb") as handle:
        handle.write(data)

libc = ctypes.CDLL(None, use_errno=True)

def call(result):
    if result != 0:
        raise OSError(ctypes.get_errno(), "")
'''

# The victim: sleeps in a child whose command line carries a marker, so the test sees it running.
SLEEPER = ("import subprocess\ndef main(args):\n    subprocess.run(['/usr/bin/sleep', args['marker']])\n"
           "    return {'slept': True}\n")


def start_victim(instance, seconds: int) -> tuple[threading.Thread, list[dict], int]:
    """A victim activation running now: its thread, where its record goes, its runtime's host pid."""
    marker = f"{seconds}.{secrets.randbelow(10**6):06d}"
    name = instance.victim.put(SLEEPER)
    records: list[dict] = []
    running = threading.Thread(target=lambda: records.append(instance.victim.invoke(name, marker=marker)))
    running.start()
    wait_for(lambda: host_pids_with(marker), timeout=60, what="the victim's activation")
    (sleep,) = host_pids_with(marker)
    runtime = int(Path(f"/proc/{sleep}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return running, records, runtime


def not_refused(outcomes: dict) -> dict:
    """The attempts the kernel did not refuse (an empty dict: all were refused)."""
    return {what: answer for what, answer in outcomes.items() if answer not in REFUSED}


def test_the_data_dir_database_and_wskprops_are_neither_visible_nor_readable(instance):
    data_dir = instance.gateway.data_dir
    wskprops = data_dir / "home" / ".wskprops"
    targets = [data_dir / "owx.db", data_dir / "activations.db", wskprops, instance.state_dir / "namespaces.json",
               "/root/.bash_history", "/etc/shadow"]
    code = ATTEMPT + '''
def main(args):
    outcomes = {path: attempt(lambda: read(path)) for path in args["targets"]}
    outcomes["data dir holds"] = attempt(lambda: os.listdir(args["data_dir"]))
    outcomes["/root holds"] = attempt(lambda: os.listdir("/root"))
    return outcomes
'''
    outcomes = instance.attacker.run(code, targets=list(map(str, targets)), data_dir=str(data_dir))
    for place, way in (("/root holds", ".pyenv"), ("data dir holds", "platform")):  # at most an empty way to
        found = outcomes.pop(place)  # the interpreter and to the namespace directories' mount point
        assert found in REFUSED if isinstance(found, str) else set(found) <= {way}, (place, found)
    assert not_refused(outcomes) == {}
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    for private in (data_dir / "owx.db", data_dir / "activations.db", wskprops):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600, private


def test_no_other_process_environment_or_memory_can_be_read(instance):
    victim_key = instance.victim.auth.split(":", 1)[1]
    running, _, runtime = start_victim(instance, 15)
    host_pids = sorted({runtime, *_instance_pids(instance)})  # its __OW_API_KEY is in the runtime's environment
    code = ATTEMPT + '''
def main(args):
    visible = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    leaks = []
    for pid in set(visible) | set(args["host_pids"]):
        for name in ("environ", "mem", "cmdline"):
            got = attempt(lambda: open("/proc/%d/%s" % (pid, name), "rb").read(1 << 20))
            if isinstance(got, bytes) and args["needle"].encode() in got:
                leaks.append("%d/%s" % (pid, name))
    return {"visible": visible, "leaks": leaks}
'''
    seen = instance.attacker.run(code, host_pids=host_pids, needle=victim_key)
    running.join()
    assert seen["leaks"] == []
    assert max(seen["visible"]) < 16, seen["visible"]  # its own pid namespace: its init, its runtime, its children


def test_a_container_holds_no_descriptor_of_the_hosts_namespaces(instance):
    """Such a descriptor gives away host pids (NS_GET_PID_IN_PIDNS), however setns refuses it."""
    code = ATTEMPT + '''
def main(args):
    held = {}
    for fd in os.listdir("/proc/self/fd"):
        target = attempt(lambda: os.readlink("/proc/self/fd/" + fd))
        if isinstance(target, str) and target.split(":")[0] in ("pid", "mnt", "net", "ipc", "uts", "cgroup", "user"):
            held[fd] = target
    ours = {name: os.readlink("/proc/self/ns/" + name) for name in ("pid", "mnt", "ipc", "uts", "cgroup")}
    return {"held": held, "ours": ours}
'''
    seen = instance.attacker.run(code)
    assert set(seen["held"].values()) <= set(seen["ours"].values()), seen


def test_signals_reach_neither_other_tenants_nor_the_gateway(instance):
    running, records, runtime = start_victim(instance, 8)
    targets = [instance.gateway.process.pid, runtime, *_instance_pids(instance)]
    code = ATTEMPT + '''
def main(args):
    return {str(pid): attempt(lambda: os.kill(pid, signal.SIGKILL)) for pid in args["targets"]}
'''
    outcomes = instance.attacker.run(code, targets=targets)
    running.join()
    assert not_refused(outcomes) == {}
    assert records and records[0]["response"]["success"], records
    assert instance.gateway.process.poll() is None


def test_the_system_is_read_only_and_privileges_cannot_be_regained(instance):
    code = ATTEMPT + '''
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000

def main(args):
    return {
        "write /etc": attempt(lambda: write("/etc/owned")),
        "write /usr/bin": attempt(lambda: write("/usr/bin/owned")),
        "write the interpreter": attempt(lambda: write(sys.executable)),
        "write /": attempt(lambda: write("/owned")),
        "write owx": attempt(lambda: write(os.path.join(os.path.dirname(json.__file__), "owned.py"))),
        "setuid 0": attempt(lambda: os.setuid(0)),
        "user namespace": attempt(lambda: call(libc.unshare(CLONE_NEWUSER))),
        "mount namespace": attempt(lambda: call(libc.unshare(CLONE_NEWNS))),
        "remount / rw": attempt(lambda: call(libc.mount(None, b"/", None, 0x20, None))),
        "kernel keyring": attempt(lambda: call(libc.syscall(250, 0, -4, 0, 0, 0))),
        "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
    }
'''
    outcomes = instance.attacker.run(code)
    identity = {key: outcomes.pop(key) for key in ("uid", "gid", "groups")}
    assert not_refused(outcomes) == {}
    assert identity["uid"] >= 65536 and identity["gid"] >= 65536 and identity["groups"] == [identity["gid"]]


def test_a_container_cannot_raise_its_limits_leave_its_cgroup_or_exceed_its_memory(instance):
    code = ATTEMPT + '''
def main(args):
    own = "/sys/fs/cgroup/memory"
    outcomes = {
        "raise memory.limit_in_bytes": attempt(lambda: write(own + "/memory.limit_in_bytes", b"-1")),
        "raise memory.memsw.limit_in_bytes": attempt(lambda: write(own + "/memory.memsw.limit_in_bytes", b"-1")),
        "move to the root group": attempt(lambda: write("/sys/fs/cgroup/cgroup.procs", str(os.getpid()).encode())),
        "mount the cgroup tree": attempt(lambda: call(libc.mount(b"none", b"/tmp", b"cgroup", 0, b"memory"))),
    }
    return {"outcomes": outcomes, "groups": open("/proc/self/cgroup").read().split()}
'''
    seen = instance.attacker.run(code)
    assert not_refused(seen["outcomes"]) == {}
    assert all(line.endswith(":/") for line in seen["groups"]), seen["groups"]  # it cannot see where it sits
    hog = "def main(args):\n    blob = bytearray(768 * 1024 * 1024)\n    return {'got': len(blob)}\n"
    record = instance.attacker.invoke(instance.attacker.put(hog, limits={"memory": 256}))
    assert not record["response"]["success"]
    assert record["response"]["result"]["error"] == "The action exhausted its memory and was aborted."


def test_no_daemon_outlives_its_container(instance):
    marker = f"31337.{secrets.randbelow(10**6):06d}"
    code = ATTEMPT + '''
def main(args):
    if os.fork() == 0:  # double fork and a new session: the classic daemon
        os.setsid()
        if os.fork() == 0:
            os.execv("/usr/bin/sleep", ["sleep", args["marker"]])
        os._exit(0)
    time.sleep(0.5)
    return {"started": True}
'''
    name = instance.attacker.put(code)
    assert instance.attacker.invoke(name, marker=marker)["response"]["success"]
    (daemon,) = wait_for(lambda: host_pids_with(marker), timeout=10, what="the daemon the action started")
    assert instance.cgroup_root in Path(f"/proc/{daemon}/cgroup").read_text()  # inside the container's cgroup
    instance.attacker.put(code, name=name)  # a new revision: the idle container of the old one is removed
    wait_for(lambda: not host_pids_with(marker), what="the daemon to die with its container")


def test_a_tenant_cannot_rewrite_another_tenants_unpacked_zip_action(instance):
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("__main__.py", "def main(args):\n    return {'who': 'victim'}\n")
    zipped = instance.victim.put("", exec={"code": base64.b64encode(archive.getvalue()).decode(), "binary": True})
    assert instance.victim.invoke(zipped)["response"]["result"] == {"who": "victim"}
    code = ATTEMPT + '''
def main(args):
    found = {}
    for top, dirs, files in os.walk("/", onerror=lambda e: None):
        if top.startswith(("/proc", "/sys", "/usr", "/dev")):
            dirs[:] = []
        if "__main__.py" in files and os.path.basename(top).startswith("owx-action-"):
            found[top] = attempt(lambda: write(os.path.join(top, "__main__.py"),
                                               b"def main(args):\\n    return {'who': 'mallory'}\\n"))
    return found
'''
    assert instance.attacker.run(code) == {}  # no other container's files are in its view at all
    assert instance.victim.invoke(zipped)["response"]["result"] == {"who": "victim"}


def test_no_runtime_can_be_reached_from_a_sandbox(instance):
    code = ATTEMPT + '''
def main(args):
    paths = set()
    for line in open("/proc/net/unix").read().splitlines()[1:]:
        parts = line.split()
        if len(parts) > 7 and "/sockets/" in parts[7]:
            paths.add(parts[7])
    outcomes = {}
    for path in sorted(paths):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        outcomes[path] = attempt(lambda: sock.connect(path))
        sock.close()
    return outcomes
'''
    outcomes = instance.attacker.run(code)
    assert outcomes and not_refused(outcomes) == {}  # the runtimes' socket paths are listed, never reachable
    assert not _tcp_listeners(_instance_pids(instance))  # and no runtime listens on TCP
    cold = instance.victim.put("def main(args):\n    return {'cold': True}\n")  # a stem cell nobody took over
    assert instance.victim.invoke(cold)["response"]["result"] == {"cold": True}


def test_tmp_is_private_and_its_quota_holds(instance):
    code = ATTEMPT + '''
def main(args):
    written, chunk = 0, b"x" * (1 << 20)
    outcome = "done"
    try:
        with open("/tmp/fill", "wb") as handle:
            for _ in range(args["mb"]):
                handle.write(chunk)
                handle.flush()
                written += 1
    except OSError as exc:
        outcome = errno.errorcode[exc.errno]
    shm = attempt(lambda: write("/dev/shm/more", chunk))
    return {"written_mb": written, "outcome": outcome, "shm": shm, "tmp": sorted(os.listdir("/tmp"))}
'''
    seen = instance.attacker.run(code, mb=2 * SMALL_TMP_MB)
    assert seen["outcome"] == "ENOSPC" and seen["written_mb"] <= SMALL_TMP_MB, seen
    assert seen["shm"] == "ENOSPC"  # /dev/shm is the same quota
    assert set(seen["tmp"]) <= {"fill", "more", *_ways_through_tmp(instance.state_dir)}, seen["tmp"]  # nobody's files


def _ways_through_tmp(state_dir: Path) -> set[str]:
    """The top directories under /tmp a sandbox shows on the way to what lives there: the namespace
    directories (in the state dir) and, read-only, owx and the interpreter (a clone or venv in /tmp)."""
    places = (state_dir, Path(owx.__file__).resolve().parent, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve())
    return {place.parts[2] for place in places if len(place.parts) > 2 and place.parts[1] == "tmp"}


def test_a_fork_bomb_is_contained_by_pids_max(instance):
    code = ATTEMPT + '''
def main(args):
    children, outcome = [], "done"
    try:
        for _ in range(10 * args["pids_max"]):
            pid = os.fork()
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            children.append(pid)
    except OSError as exc:
        outcome = errno.errorcode[exc.errno]
    for pid in children:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return {"forked": len(children), "outcome": outcome}
'''
    seen = instance.attacker.run(code, pids_max=PIDS_MAX)
    assert seen["outcome"] == "EAGAIN" and seen["forked"] < PIDS_MAX, seen
    assert instance.victim.run("def main(args):\n    return {'fine': True}\n") == {"fine": True}


# Prints as fast as it can until its time limit stops it.
FLOOD = "import sys\ndef main(args):\n    line = 'x' * 1000 + '\\n'\n    while True:\n        sys.stdout.write(line)\n"
FLOOD_TIMEOUT_MS = 6000
CHATTY = ("import sys\ndef main(args):\n    for _ in range(args['n']):\n        sys.stdout.write('x\\n')\n"
          "    return {'n': args['n']}\n")
CHATTY_LINES = 200_000
LOOP_THREAD = "owx-loop"  # the gateway's event loop, which reads every container's output


def loop_cpu_seconds(pid: int) -> float:
    """CPU seconds the gateway's event-loop thread has used so far."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        if (task / "comm").read_text().strip() == LOOP_THREAD:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    raise AssertionError(f"no {LOOP_THREAD} thread in {pid}")


def loop_cores_while(instance, run: Callable[[], None], settle_s: float, measure_s: float) -> float:
    """Cores the gateway's loop used for ``measure_s`` after ``settle_s``, while two threads ``run`` again
    and again."""
    until = time.monotonic() + settle_s + measure_s

    def again() -> None:
        while time.monotonic() < until:
            run()

    running = [threading.Thread(target=again) for _ in range(2)]
    for thread in running:
        thread.start()
    time.sleep(settle_s)
    pid = instance.gateway.process.pid
    before, started = loop_cpu_seconds(pid), time.monotonic()
    time.sleep(measure_s)
    cores = (loop_cpu_seconds(pid) - before) / (time.monotonic() - started)
    for thread in running:
        thread.join(90)
    return cores


def test_a_tenant_flooding_its_output_past_the_log_limit_costs_the_gateways_loop_little(instance):
    """Output past the log limit is dropped; read as fast as it came, two such floods took 0.70-0.86
    of a core of the loop every tenant's invocations share. Read in turns, they take a sliver."""
    name = instance.attacker.put(FLOOD, limits={"timeout": FLOOD_TIMEOUT_MS})
    floods: list[dict] = []
    cores = loop_cores_while(instance, lambda: floods.append(instance.attacker.invoke(name)), 1.5, 2.0)
    assert instance.victim.run("def main(args):\n    return {'fine': True}\n") == {"fine": True}
    assert cores < 0.2, f"the loop spent {cores:.2f} cores reading the floods"
    assert len(floods) == 2
    for record in floods:  # each flood ends at its time limit, its logs cut at the limit
        assert record["response"]["status"] == "action developer error", record["response"]
        assert {"key": "timeout", "value": True} in record["annotations"]
        assert sum(len(line) for line in record["logs"]) < 11 * 1024 * 1024


def test_a_tenant_printing_short_lines_within_its_limit_gets_a_bounded_share_of_the_loop(instance):
    """200,000 one-character lines fit the 10 MB limit and are all kept, but cost a few microseconds each
    on the loop: two such activations at a time took 0.82 of its core. Past each activation's first
    MiB they are read in turns that take at most a tenth of the loop."""
    name = instance.attacker.put(CHATTY, limits={"timeout": 60000})
    records: list[dict] = []
    cores = loop_cores_while(instance, lambda: records.append(instance.attacker.invoke(name, n=CHATTY_LINES)),
                             0.5, 2.0)
    assert cores < 0.45, f"the loop spent {cores:.2f} cores on the lines"
    assert records and all((r["response"]["result"], len(r["logs"])) == ({"n": CHATTY_LINES}, CHATTY_LINES)
                           for r in records)


CHATTY_AT_ONCE = 8
CHATTY_AT_ONCE_LINES = 20_000  # within each activation's first MiB: read as they come
VICTIM_P50_MS = 20.0  # a GET's p50 here: 0.5 ms idle, 88-96 ms beside the attacker before it had a share
VICTIM_MEAN_MS = 10.0  # and its mean: 2.5-2.8 ms, 26-49 ms beside four namespaces each with a share of its own
# the loop's cores meanwhile: 0.33-0.36; 0.47-0.55 when the records of the lines were not paid from the share
PRINTING_LOOP_CORES = 0.42
LATENCY_CLIENT = """
import statistics, sys, time, requests
session = requests.Session(); session.auth = tuple(sys.argv[2].split(":", 1))
took, until = [], time.monotonic() + float(sys.argv[3])
while time.monotonic() < until:
    started = time.perf_counter(); answer = session.get(sys.argv[1]); took.append(time.perf_counter() - started)
    assert answer.status_code == 200, answer.status_code
print(statistics.median(took) * 1000, statistics.mean(took) * 1000)
"""


@pytest.mark.parametrize("namespaces", [1, 4])
def test_a_tenant_printing_in_many_activations_at_once_leaves_other_tenants_requests_fast(instance, namespaces):
    """Eight activations printing 20,000 short lines at a time are read as they come (each within its
    first MiB), and that reading took 0.74 of the loop's core: another tenant's requests waited
    behind it (a GET's p50 88-96 ms instead of 0.5). Each tenant's reading now takes at most its share
    of the loop, so the victim barely notices; the attacker's logs are still whole. Spread over four
    namespaces of the attacker, each with a share of its own, the same eight gave the victim a p50 of
    8-54 ms and a mean of 26-49: tenants printing together split one share. The loop's work on the
    records of those lines is paid from the share too."""
    attackers = [instance.attacker, *(add_tenant(instance.gateway, f"mallory{n}") for n in range(1, namespaces))]
    names = [attacker.put(CHATTY, limits={"timeout": 60000, "memory": 128}) for attacker in attackers]
    victim = instance.victim.put("def main(args):\n    return {}\n")
    until = time.monotonic() + 10
    records: list[dict] = []

    def again(attacker: Tenant, name: str) -> None:
        while time.monotonic() < until:
            records.append(attacker.invoke(name, n=CHATTY_AT_ONCE_LINES))

    printing = [threading.Thread(target=again, args=(attackers[n % namespaces], names[n % namespaces]))
                for n in range(CHATTY_AT_ONCE)]
    for thread in printing:
        thread.start()
    time.sleep(3)
    pid = instance.gateway.process.pid
    before, started = loop_cpu_seconds(pid), time.monotonic()
    measured = subprocess.run([sys.executable, "-c", LATENCY_CLIENT, instance.gateway.api(f"actions/{victim}"),
                               instance.victim.auth, "4"], capture_output=True, text=True, timeout=120)
    cores = (loop_cpu_seconds(pid) - before) / (time.monotonic() - started)
    for thread in printing:
        thread.join(120)
    assert measured.returncode == 0, measured.stderr
    p50_ms, mean_ms = map(float, measured.stdout.split())
    assert p50_ms < VICTIM_P50_MS and mean_ms < VICTIM_MEAN_MS, f"the victim's GET p50 {p50_ms:.1f} ms, mean {mean_ms:.1f}"
    assert cores < PRINTING_LOOP_CORES, f"the loop spent {cores:.2f} cores"
    assert records and all(len(r["logs"]) == CHATTY_AT_ONCE_LINES for r in records)


CHECKPOINTER = ATTEMPT + '''
from owx.canary.checkpoint import Checkpointer

def main(args):
    with Checkpointer.from_env() as ckpt:
        ckpt.save("only", value=args.get("value", 0))
    found = {path: attempt(lambda: read(path)) for path in args.get("targets", [])}
    for path in args.get("targets", []):
        namespaces = path.rsplit("/", 3)[0]  # <state>/namespaces of <state>/namespaces/<gid>/canary/<db>
        found["list " + namespaces] = attempt(lambda: sorted(os.listdir(namespaces)))
    return {"found": found, "saved": True}
'''


def test_checkpoints_of_other_namespaces_are_out_of_sight(instance):
    canary = [{"key": "canary", "value": {"checkpoint": "explicit"}}]
    victim = instance.victim.invoke(instance.victim.put(CHECKPOINTER, annotations=canary), value=42)
    assert victim["response"]["success"], victim
    gids = json.loads((instance.state_dir / "namespaces.json").read_text())
    store = instance.state_dir / "namespaces" / str(gids["guest"]) / "canary"
    database = store / "checkpoints.db"
    assert database.stat().st_gid == gids["guest"] and stat.S_IMODE(database.stat().st_mode) == 0o660
    attacker = instance.attacker.invoke(instance.attacker.put(CHECKPOINTER, annotations=canary),
                                        targets=[str(database)])
    assert attacker["response"]["success"], attacker  # its own store works ...
    found = attacker["response"]["result"]["found"]
    assert found.pop(str(database)) in REFUSED  # ... the victim's is not there
    (listing,) = found.values()
    assert listing == [str(gids["mallory"])], listing  # of every namespace directory, it sees its own


def _instance_pids(instance) -> list[int]:
    """Every process in the instance's containers (host pids)."""
    root = Cgroup(instance.cgroup_root)
    return [pid for node in root.children() for group in node.children() for pid in group.pids()]


def _tcp_listeners(pids: list[int]) -> list[int]:
    """The processes among ``pids`` that hold a listening TCP socket."""
    listening = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":
                listening.add(fields[9])
    holders = []
    for pid in pids:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        if any(link.startswith("socket:[") and link[8:-1] in listening for link in links):
            holders.append(pid)
    return holders


def test_a_callers_own_runtime_options_never_reach_the_runtime(instance):
    code = '''import os
def main(args):
    return {"args": sorted(args), "id": os.environ.get("__OW_ACTIVATION_ID"), "ns": os.environ.get("__OW_NAMESPACE")}
'''
    forged = {"keep_warm": True, "activation_id": "0" * 32, "namespace": instance.victim.namespace,
              "canary_function_id": "the-victims-function", "key": "a guess"}
    record = instance.attacker.invoke(instance.attacker.put(code), x=1, __owx=forged)
    assert record["response"]["success"], record  # it ran: no keep-warm short cut
    assert record["response"]["result"] == {"args": ["x"], "id": record["activationId"],
                                            "ns": instance.attacker.namespace}


PROBE_NETWORK = ATTEMPT + '''
from urllib.request import urlopen

def main(args):
    outcomes = {}
    for host, port in args["tcp"]:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(10)
        outcomes["tcp %s %d" % (host, port)] = attempt(lambda: sock.connect((host, port)))
        sock.close()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    outcomes["udp"] = attempt(lambda: udp.sendto(b"hello", ("127.0.0.1", args["udp"])) and None)
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    outcomes["abstract"] = attempt(lambda: unix.connect("\\0" + args["abstract"]))
    outcomes["gateway"] = attempt(lambda: urlopen(os.environ["__OW_API_HOST"] + "/api/v1", timeout=10).status)
    address, port = args["elsewhere"]
    elsewhere = socket.create_connection((address, port), timeout=10)
    outcomes["elsewhere"] = elsewhere.recv(64).decode()
    for address in args["metadata"]:
        metadata = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM)
        metadata.settimeout(10)
        outcomes["metadata " + address] = attempt(lambda: metadata.connect((address, port)))
    return outcomes
'''


def test_no_service_of_this_machine_but_the_gateway_is_reachable_and_other_machines_are(instance, tmp_path):
    """A tenant's action reaches no listener of the host (loopback or not, IPv4 or IPv6, UDP, abstract
    Unix socket), while it still reaches the gateway and a machine elsewhere on the network."""
    services = [listening(socket.AF_INET, "127.0.0.1"), listening(socket.AF_INET6, "::1"),
                listening(socket.AF_INET, _primary_address())]
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(0.5)
    abstract = f"owx-test-{secrets.token_hex(4)}"
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind("\0" + abstract)
    unix.listen()
    with _other_machine() as elsewhere:
        outcomes = instance.attacker.run(PROBE_NETWORK, tcp=[sock.getsockname()[:2] for sock in services],
                                         udp=udp.getsockname()[1], abstract=abstract, elsewhere=elsewhere.greeter,
                                         metadata=METADATA_ADDRESSES)
    assert outcomes.pop("gateway") == 200, outcomes
    assert outcomes.pop("elsewhere") == "hello from elsewhere", outcomes
    assert len(outcomes) == 7 and not_refused(outcomes) == {}, outcomes  # that machine's metadata addresses too
    try:
        received = udp.recv(16)
    except TimeoutError:
        received = None
    assert received is None
    for sock in (*services, udp, unix):
        sock.close()


SQUAT = ATTEMPT + '''
def main(args):
    outcomes = {}
    for kind, host, port in args["ports"]:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM if kind == "tcp" else socket.SOCK_DGRAM)
        outcomes["bind %s %s %d" % (kind, host, port)] = attempt(lambda: sock.bind((host, port)) or sock.getsockname()[1])
        sock.close()
    return outcomes
'''


def test_no_port_of_this_machine_can_be_squatted(instance):
    """An action binds no TCP or UDP port, so it cannot take over the port of a service that is down (the
    gateway's, the Canary store's, a metrics daemon's): other tenants' calls, or the datagrams host
    processes send it, would reach the attacker. A UDP socket may still let the kernel pick its port,
    as a client's first send does."""
    freed = [listening(socket.AF_INET, "127.0.0.1"), listening(socket.AF_INET6, "::1")]
    ports = [sock.getsockname()[:2] for sock in freed]
    for sock in freed:
        sock.close()  # a service that went down
    squats = [("tcp", *ports[0]), ("tcp", *ports[1]), ("tcp", "0.0.0.0", ports[0][1]), ("tcp", "127.0.0.1", 0),
              ("tcp", "::", 0), ("udp", "127.0.0.1", ports[0][1]), ("udp", "0.0.0.0", 8125), ("udp", "::", 5353)]
    picked = [("udp", "0.0.0.0", 0), ("udp", "::", 0)]
    outcomes = instance.attacker.run(SQUAT, ports=squats + picked)
    refused = {key: outcomes[key] for key in (f"bind {kind} {host} {port}" for kind, host, port in squats)}
    assert not_refused(refused) == {}, outcomes
    assert all(isinstance(outcomes[f"bind udp {host} 0"], int) for _, host, _ in picked), outcomes


LISTEN_UNBOUND = ATTEMPT + '''
KEPT = []

def main(args):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listened = attempt(lambda: server.listen(4))  # no bind: the kernel picks a port, on every address
    KEPT.append(server)  # still listening after the activation (the runtime's process lives on)
    return {"listened": listened, "port": server.getsockname()[1]}
'''
CONNECT = '''import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)
    print("connected")
except OSError as exc:
    print(type(exc).__name__)
'''


def test_a_socket_listening_without_a_bind_takes_no_connection_from_another_machine(instance):
    """Landlock refuses an action's bind of a TCP port, not the port the kernel picks for a socket that
    listens unbound: that socket must not become a server other machines reach."""
    with _other_machine() as elsewhere:
        port = instance.attacker.run(LISTEN_UNBOUND)["port"]
        client = netns.wrap(elsewhere.name, [sys.executable, "-c", CONNECT, elsewhere.our_address, str(port)])
        connected = subprocess.run(client, capture_output=True, text=True, timeout=30, check=False).stdout.strip()
    assert port == 0 or connected != "connected", (port, connected)


def _primary_address() -> str:
    """This machine's address on its default route (no packet is sent)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.connect(("192.0.2.123", 9))
    address = probe.getsockname()[0]
    probe.close()
    return address


@dataclass
class OtherMachine:
    """A machine elsewhere (its network namespace), its greeter's [address, port], this machine's
    address as it sees it."""

    name: str
    greeter: list[Any]
    our_address: str = "10.231.77.1"


@contextlib.contextmanager
def _other_machine():
    """Another machine on the network: a network namespace behind a veth, greeting whoever connects to
    its greeter's (address, port), or to that port of its metadata addresses (``METADATA_ADDRESSES``)."""
    name = f"{netns.PREFIX}o{secrets.token_hex(3)}"
    host_side, address = f"{name}h", "10.231.77.2"
    on_host = [f"link add {host_side} type veth peer name eth0 netns {name}", f"link set {host_side} up",
               f"addr add {OtherMachine.our_address}/30 dev {host_side}", f"addr add 169.254.77.1/30 dev {host_side}",
               f"addr add fd00:ec2::1/64 dev {host_side} nodad"]
    inside = [f"addr add {address}/30 dev eth0", f"addr add {METADATA_ADDRESSES[0]}/30 dev eth0",
              f"addr add {METADATA_ADDRESSES[1]}/64 dev eth0 nodad", "link set eth0 up"]
    try:
        netns.create(name)
        for command in on_host:
            netns.run(None, ["ip", *command.split()])
        for command in inside:
            netns.run(name, ["ip", *command.split()])
        server = subprocess.Popen(netns.wrap(name, [sys.executable, "-c", GREETER]), stdout=subprocess.PIPE, text=True)
        port = int(server.stdout.readline())
        try:
            yield OtherMachine(name, [address, port])
        finally:
            server.kill()
            server.wait()
    finally:
        netns.run(None, ["ip", "link", "del", host_side], check=False)
        netns.remove(name)


# where a cloud's instance metadata service would be (169.254.169.254, or AWS's fd00:ec2::254)
METADATA_ADDRESSES = ("169.254.77.2", "fd00:ec2::254")
GREETER = '''import socket
server = socket.create_server(("::", 0), family=socket.AF_INET6, dualstack_ipv6=True)
print(server.getsockname()[1], flush=True)
while True:
    conn, _ = server.accept()
    conn.sendall(b"hello from elsewhere")
    conn.close()
'''
