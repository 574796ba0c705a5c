"""OpenWhisk's runtime protocol against a real proxy process."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from owx.common.cgroups import Cgroup
from owx.runtimes.protocol import MEMORY_REPORT_PREFIX

from .processes import SENTINEL, RuntimeProcess, free_port, zip_action

MIB = 1 << 20
ECHO = "def main(args):\n    return {'echo': args}\n"


def test_plain_source_runs_with_default_main(runtime: RuntimeProcess) -> None:
    init = runtime.init(ECHO)
    assert init.status_code == 200, init.text
    assert init.json() == {"ok": True}
    for n in range(3):
        run = runtime.run({"n": n, "name": "Ünïcode"})
        assert run.status_code == 200
        assert run.json() == {"echo": {"n": n, "name": "Ünïcode"}}


def test_named_main_and_list_result(runtime: RuntimeProcess) -> None:
    assert runtime.init("def other(args):\n    return [args['a'], 2]\n", main="other").status_code == 200
    run = runtime.run({"a": 1})
    assert (run.status_code, run.json()) == (200, [1, 2])


def test_zip_with_main_module_and_sibling_import(runtime: RuntimeProcess) -> None:
    code = zip_action(
        {
            "__main__.py": "import helper, os\ndef main(args):\n    return {'v': helper.double(args['x']), 'cwd': os.getcwd()}\n",
            "helper.py": "def double(x):\n    return 2 * x\n",
            "data/config.json": '{"k": 1}',
        }
    )
    assert runtime.init(code, binary=True).status_code == 200
    run = runtime.run({"x": 21})
    assert run.json()["v"] == 42
    assert (Path(run.json()["cwd"]) / "data" / "config.json").is_file()  # runs inside the extracted zip


def test_zip_virtualenv_packages_come_first(runtime: RuntimeProcess) -> None:
    """A virtualenv/ in the zip is importable and shadows the interpreter's own packages."""
    site = f"virtualenv/lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"
    code = zip_action(
        {
            "__main__.py": "import yaml, venvonly\ndef main(args):\n    return {'yaml': yaml.WHO, 'extra': venvonly.VALUE}\n",
            f"{site}/yaml/__init__.py": "WHO = 'the virtualenv copy'\n",
            f"{site}/venvonly.py": "VALUE = 7\n",
        }
    )
    init = runtime.init(code, binary=True)
    assert init.status_code == 200, init.text
    assert runtime.run().json() == {"yaml": "the virtualenv copy", "extra": 7}


def test_zip_without_main_module_is_refused(runtime: RuntimeProcess) -> None:
    init = runtime.init(zip_action({"action.py": ECHO}), binary=True)
    assert init.status_code == 502
    assert "__main__.py" in init.json()["error"]


def test_environment_from_init_and_run(runtime: RuntimeProcess) -> None:
    code = (
        "import os\n"
        "AT_IMPORT = os.environ['GREETING']\n"
        "def main(args):\n"
        "    return {k: os.environ.get(k) for k in args['keys']} | {'import': AT_IMPORT}\n"
    )
    assert runtime.init(code, env={"GREETING": "hello", "LIMIT": 3}).status_code == 200
    keys = [
        "GREETING", "LIMIT", "__OW_NAMESPACE", "__OW_ACTION_NAME", "__OW_ACTIVATION_ID",
        "__OW_TRANSACTION_ID", "__OW_DEADLINE", "__OW_API_KEY", "__OW_CANARY_FUNCTION",
    ]  # fmt: skip
    run = runtime.run(
        {"keys": keys},
        namespace="guest",
        action_name="/guest/env",
        activation_id="a" * 32,
        transaction_id="tid-1",
        deadline=1700000000000,
        api_key="uuid:key",
        canary_function="fn-1",
    )
    assert run.json() == {
        "GREETING": "hello",
        "LIMIT": "3",
        "__OW_NAMESPACE": "guest",
        "__OW_ACTION_NAME": "/guest/env",
        "__OW_ACTIVATION_ID": "a" * 32,
        "__OW_TRANSACTION_ID": "tid-1",
        "__OW_DEADLINE": "1700000000000",
        "__OW_API_KEY": "uuid:key",
        "__OW_CANARY_FUNCTION": "fn-1",
        "import": "hello",
    }


def test_next_activation_does_not_see_the_previous_ones_metadata(runtime: RuntimeProcess) -> None:
    code = "import os\ndef main(args):\n    return {'fn': os.environ.get('__OW_CANARY_FUNCTION_ID')}\n"
    assert runtime.init(code).status_code == 200
    first = runtime.run({}, activation_id="a" * 32, canary_function_id="fn-1")
    assert first.json() == {"fn": "fn-1"}
    second = runtime.run({}, activation_id="b" * 32)  # a plain activation in the same warm container
    assert second.json() == {"fn": None}


def test_owx_options_count_only_with_the_key_given_at_init(runtime: RuntimeProcess) -> None:
    """``__owx`` (what a gateway behind an upstream OpenWhisk passes per activation) is honoured only
    with the key the deploying gateway gave at /init; the key stays out of the action's environment,
    and the reserved input never reaches the action."""
    code = "import os\ndef main(args):\n    return {'args': args, 'id': os.environ.get('__OW_ACTIVATION_ID'), " \
           "'key': os.environ.get('__OWX_OPTIONS_KEY')}\n"
    assert runtime.init(code, env={"__OWX_OPTIONS_KEY": "s3cret"}).status_code == 200
    forged = runtime.run({"x": 1, "__owx": {"activation_id": "f" * 32, "key": "guess"}}, activation_id="a" * 32)
    assert forged.json() == {"args": {"x": 1}, "id": "a" * 32, "key": None}
    assert runtime.run({"__owx": {"keep_warm": True, "key": "guess"}}).json() == {"args": {}, "id": None, "key": None}
    genuine = runtime.run({"x": 1, "__owx": {"activation_id": "b" * 32, "key": "s3cret"}}, activation_id="a" * 32)
    assert genuine.json() == {"args": {"x": 1}, "id": "b" * 32, "key": None}
    assert runtime.run({"__owx": {"keep_warm": True, "key": "s3cret"}}).json() == {"warm": True}


def test_a_memory_report_is_read_fresh_and_written_only_for_the_deploying_gateway(runtime: RuntimeProcess) -> None:
    """``report_memory`` with the init key puts the container's peak memory (its cgroup's high-water mark,
    read anew each time) on stderr as the activation's last line before the sentinel; a forged key gets none."""
    group = Cgroup(f"owx-test-runtime/{uuid.uuid4().hex[:8]}").create()
    try:
        group.add(runtime.process.pid)
        code = "def main(args):\n    block = b'x' * (args['mb'] << 20)\n    return {'mb': len(block) >> 20}\n"
        assert runtime.init(code, env={"__OWX_OPTIONS_KEY": "s3cret"}).status_code == 200
        for mb, key in ((1, "guess"), (1, "s3cret"), (64, "s3cret")):
            run = runtime.run({"mb": mb, "__owx": {"report_memory": True, "key": key}})
            assert run.json() == {"mb": mb}
        peak_now = group.memory_peak()
        stderr = runtime.stderr()  # before the group's end kills the runtime: its last sentinel follows the answer
    finally:
        group.destroy()
        Cgroup("owx-test-runtime").remove_if_empty()
    forged, small, large, _ = stderr.split(SENTINEL + "\n")
    assert MEMORY_REPORT_PREFIX not in forged
    reports = []
    for segment in (small, large):
        *_, last = segment.splitlines()
        assert last.startswith(MEMORY_REPORT_PREFIX) and segment.count(MEMORY_REPORT_PREFIX) == 1
        reports.append(int(last.removeprefix(MEMORY_REPORT_PREFIX)))
    assert reports[1] - reports[0] >= 60 * MIB  # the 64 MiB block, not a figure kept from the first read
    assert abs(peak_now - reports[1]) < 8 * MIB


def test_owx_options_without_a_key_at_init_count_for_nothing(runtime: RuntimeProcess) -> None:
    assert runtime.init(ECHO).status_code == 200
    for key in ("", None, 7, "anything"):
        run = runtime.run({"__owx": {"keep_warm": True, "key": key}})
        assert (run.status_code, run.json()) == (200, {"echo": {}})


def test_second_init_is_forbidden(runtime: RuntimeProcess) -> None:
    assert runtime.init(ECHO).status_code == 200
    again = runtime.init("def main(args):\n    return {'replaced': True}\n")
    assert again.status_code == 403
    assert again.json() == {"error": "Cannot initialize the action more than once."}
    assert runtime.run({"x": 1}).json() == {"echo": {"x": 1}}  # the first action stays


def test_syntax_error_is_502_with_traceback(runtime: RuntimeProcess) -> None:
    init = runtime.init("def main(args:\n    return {}\n")
    assert init.status_code == 502
    assert "SyntaxError" in init.json()["error"]
    assert "SyntaxError" in runtime.stderr()


def test_import_error_and_missing_main_are_502(runtime: RuntimeProcess, tmp_path: Path) -> None:
    init = runtime.init("import no_such_module_owx\ndef main(a):\n    return a\n")
    assert init.status_code == 502
    assert "ModuleNotFoundError" in init.json()["error"]
    (tmp_path / "other").mkdir()
    other = RuntimeProcess(tmp_path / "other")
    try:
        missing = other.init("def handler(args):\n    return args\n")
        assert missing.status_code == 502
        assert "'main'" in missing.json()["error"]
    finally:
        other.stop()


def test_exception_is_502_with_traceback_on_stderr(runtime: RuntimeProcess) -> None:
    assert runtime.init("def main(args):\n    raise ValueError('boom ' + args['w'])\n").status_code == 200
    run = runtime.run({"w": "now"})
    assert run.status_code == 502
    assert run.json() == {"error": "ValueError: boom now"}
    err = runtime.stderr()
    assert "Traceback (most recent call last)" in err
    assert "raise ValueError('boom ' + args['w'])" in err  # the action's own source line
    assert err.index("ValueError: boom now") < err.rindex(SENTINEL)


def test_results_that_are_not_objects_are_errors(runtime: RuntimeProcess) -> None:
    code = "def main(args):\n    return {'str': 'text', 'none': None, 'set': {'x': {1}}}[args['kind']]\n"
    assert runtime.init(code).status_code == 200
    for kind in ("str", "none"):
        run = runtime.run({"kind": kind})
        assert run.status_code == 502
        assert run.json() == {"error": "The action did not return a dictionary or array."}
    unserialisable = runtime.run({"kind": "set"})
    assert unserialisable.status_code == 502
    assert "not JSON serializable" in unserialisable.json()["error"]
    assert runtime.run({"kind": "nope"}).status_code == 502  # KeyError inside main


def test_sentinel_after_every_activation_on_both_streams(runtime: RuntimeProcess) -> None:
    code = "import sys\ndef main(args):\n    print('out', args['i'])\n    print('err', args['i'], file=sys.stderr)\n    return {}\n"
    assert runtime.init(code).status_code == 200
    for i in range(3):
        assert runtime.run({"i": i}).status_code == 200
        out, err = runtime.stdout(), runtime.stderr()
        assert out.count(SENTINEL) == err.count(SENTINEL) == i + 1
        assert out.rstrip().endswith(f"out {i}\n{SENTINEL}")
        assert err.rstrip().endswith(f"err {i}\n{SENTINEL}")
    runtime.run({})  # fails (KeyError) and still ends with the sentinel
    assert runtime.stdout().count(SENTINEL) == runtime.stderr().count(SENTINEL) == 4


def test_concurrent_runs_overlap_and_see_their_own_environment(runtime: RuntimeProcess) -> None:
    code = (
        "import os, time\n"
        "def main(args):\n"
        "    time.sleep(0.5)\n"
        "    return {'mine': os.environ['__OW_ACTIVATION_ID'], 'getenv': os.getenv('__OW_ACTIVATION_ID')}\n"
    )
    assert runtime.init(code).status_code == 200
    results: dict[str, dict[str, str]] = {}

    def invoke(activation_id: str) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", runtime.port, timeout=10)
        conn.request("POST", "/run", json.dumps({"value": {}, "activation_id": activation_id}))
        results[activation_id] = json.loads(conn.getresponse().read())
        conn.close()

    started = time.monotonic()
    threads = [threading.Thread(target=invoke, args=(f"act-{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    assert elapsed < 1.5, f"4 activations of 0.5 s took {elapsed:.2f} s: not concurrent"
    assert results == {f"act-{i}": {"mine": f"act-{i}", "getenv": f"act-{i}"} for i in range(4)}


def test_bad_requests_get_openwhisk_answers(runtime: RuntimeProcess) -> None:
    before = runtime.run({"x": 1})
    assert (before.status_code, before.json()) == (500, {"error": "no action defined yet"})
    malformed = runtime.post("/init", data=b'{"value": ')
    assert malformed.status_code == 400 and malformed.json()["error"].startswith("Error unmarshaling request")
    no_code = runtime.post("/init", {"value": {"main": "main"}})
    assert (no_code.status_code, no_code.json()) == (403, {"error": "Missing main/no code to execute."})
    wrong_type = runtime.post("/init", {"value": {"code": ECHO, "env": ["A=1"]}})
    assert wrong_type.status_code == 400 and "value.env" in wrong_type.json()["error"]
    not_base64 = runtime.init("@@@not base64@@@", binary=True)
    assert not_base64.status_code == 400 and "cannot decode" in not_base64.json()["error"]
    assert runtime.post("/other", {}).status_code == 404
    assert runtime.session.get(runtime.url + "/run").status_code == 405
    # none of that initialised anything or broke the server
    assert runtime.init(ECHO).status_code == 200
    assert runtime.post("/run", data=b"[1, 2").status_code == 400
    assert runtime.post("/run", {"value": "a string"}).status_code == 400
    assert runtime.run({"ok": 1}).json() == {"echo": {"ok": 1}}


def test_keep_alive_chunked_bodies_and_expect_continue(runtime: RuntimeProcess) -> None:
    assert runtime.init(ECHO).status_code == 200
    conn = http.client.HTTPConnection("127.0.0.1", runtime.port, timeout=10)
    conn.request("POST", "/run", body=iter([b'{"value": ', b'{"a": 1}}']), encode_chunked=True,
                 headers={"Transfer-Encoding": "chunked"})  # fmt: skip
    assert json.loads(conn.getresponse().read()) == {"echo": {"a": 1}}
    first_socket = conn.sock
    big = {"value": {"blob": "x" * 5000}}
    conn.request("POST", "/run", json.dumps(big), headers={"Expect": "100-continue"})
    response = conn.getresponse()
    assert response.status == 200 and json.loads(response.read())["echo"]["blob"] == "x" * 5000
    assert conn.sock is first_socket  # same connection: keep-alive
    conn.close()


def test_garbage_on_the_wire_gets_400_and_server_survives(runtime: RuntimeProcess) -> None:
    with socket.create_connection(("127.0.0.1", runtime.port), timeout=5) as sock:
        sock.sendall(b"NONSENSE\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 400")
    assert runtime.init(ECHO).status_code == 200


def test_port_mode_and_owx_runtime_serve(tmp_path: Path) -> None:
    for command in (
        [sys.executable, "-m", "owx.runtimes.python_action"],
        [sys.executable, "-m", "owx.cli", "runtime", "serve"],
    ):
        port = free_port()
        proc = RuntimeProcess(tmp_path, command, port=port)
        try:
            assert proc.init(ECHO).status_code == 200
            assert proc.run({"p": port}).json() == {"echo": {"p": port}}
        finally:
            proc.stop()


def test_cold_start_is_fast(tmp_path: Path) -> None:
    """Spawn to answered /init (the embedded platform's cold start path): loose bound, median of 5."""
    timings = []
    for i in range(5):
        workdir = tmp_path / str(i)
        workdir.mkdir()
        started = time.perf_counter()
        proc = RuntimeProcess(workdir)
        try:
            assert proc.init(ECHO).status_code == 200
            timings.append(time.perf_counter() - started)
        finally:
            proc.stop()
    assert sorted(timings)[2] < 1.5, f"cold starts {timings}"  # loose: `owx bench sandbox` measures it


def test_inherited_unix_socket(tmp_path: Path) -> None:
    """``--fd`` also accepts a listening Unix socket."""
    path = str(tmp_path / "runtime.sock")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(path)
        listener.listen(4)
        process = subprocess.Popen(
            [sys.executable, "-m", "owx.runtimes.python_action", "--fd", str(listener.fileno())],
            pass_fds=(listener.fileno(),),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    try:
        with socket.socket(socket.AF_UNIX) as client:
            client.settimeout(10)
            client.connect(path)
            for path_, body in (("/init", {"value": {"code": ECHO}}), ("/run", {"value": {"u": 1}})):
                data = json.dumps(body).encode()
                client.sendall(b"POST %s HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (path_.encode(), len(data), data))
                head, _, rest = client.recv(65536).partition(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200")
        assert json.loads(rest) == {"echo": {"u": 1}}
    finally:
        process.kill()
        process.wait()


def test_subprocesses_see_this_activations_metadata_and_none_of_the_last(runtime: RuntimeProcess) -> None:
    """The process environment (what a subprocess inherits) holds the running activation's ``__OW_*``
    values: a later activation's, and none an earlier one had that it does not."""
    code = "import subprocess\ndef main(args):\n    return {'env': subprocess.check_output(['env'], text=True)}\n"
    assert runtime.init(code).status_code == 200

    def child_env(**meta: Any) -> dict[str, str]:
        lines = runtime.run({}, **meta).json()["env"].splitlines()
        return {k: v for k, _, v in (line.partition("=") for line in lines) if k.startswith("__OW_")}

    assert child_env(activation_id="a" * 32, canary_function_id="fn-1", namespace="guest") == {
        "__OW_ACTIVATION_ID": "a" * 32, "__OW_CANARY_FUNCTION_ID": "fn-1", "__OW_NAMESPACE": "guest"}
    assert child_env(activation_id="b" * 32, namespace="guest") == {
        "__OW_ACTIVATION_ID": "b" * 32, "__OW_NAMESPACE": "guest"}
    # values written where the environment points, shorter and longer than the string holds
    assert child_env(activation_id="c", namespace="guest")["__OW_ACTIVATION_ID"] == "c"
    assert child_env(activation_id="d" * 200, namespace="guest")["__OW_ACTIVATION_ID"] == "d" * 200



def test_subprocesses_see_the_next_activations_metadata_after_the_action_changed_its_own(
        runtime: RuntimeProcess) -> None:
    """An action may set or delete ``__OW_*`` variables through ``os.environ`` (the C environment then
    points at other strings than the runtime's): the next activation's subprocesses still see its own."""
    code = ("import os, subprocess\n"
            "def main(args):\n"
            "    env = subprocess.check_output(['env'], text=True)\n"
            "    os.environ['__OW_ACTIVATION_ID'] = 'set by the action'\n"
            "    del os.environ['__OW_NAMESPACE']\n"
            "    return {'env': env}\n")
    assert runtime.init(code).status_code == 200

    def child_env(**meta: Any) -> dict[str, str]:
        lines = runtime.run({}, **meta).json()["env"].splitlines()
        return {k: v for k, _, v in (line.partition("=") for line in lines) if k.startswith("__OW_")}

    for n in range(3):
        assert child_env(activation_id=f"{n:032x}", namespace="guest") == {
            "__OW_ACTIVATION_ID": f"{n:032x}", "__OW_NAMESPACE": "guest"}


ACTIVATIONS_FOR_GROWTH = 20_000


def test_a_warm_runtime_does_not_grow_with_its_activations(runtime: RuntimeProcess) -> None:
    """Each activation's id, transaction id and deadline are new: a runtime that kept every value it
    was given as a C environment string (glibc's ``setenv`` does) grew by some 200 bytes per activation."""
    assert runtime.init("def main(args):\n    return {}\n").status_code == 200
    connection = http.client.HTTPConnection("127.0.0.1", runtime.port, timeout=30)

    def activations(first: int, count: int) -> None:
        for n in range(first, first + count):
            body = json.dumps({"value": {}, "activation_id": f"{n:032x}", "transaction_id": f"t{n:031x}",
                               "deadline": str(1_800_000_000_000 + n), "namespace": "guest"})
            connection.request("POST", "/run", body, {"Content-Type": "application/json"})
            answer = connection.getresponse()
            assert answer.status == 200, answer.read()
            answer.read()

    activations(0, 2_000)  # the interpreter's own caches and free lists settle
    before = _rss_kb(runtime.process.pid)
    activations(2_000, ACTIVATIONS_FOR_GROWTH)
    grown = _rss_kb(runtime.process.pid) - before
    assert grown < 1024, f"{grown} kB more after {ACTIVATIONS_FOR_GROWTH} activations"


def _rss_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0])
