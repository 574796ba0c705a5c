"""A real action process killed with SIGKILL mid-loop; the next process restores from the
latest checkpoint and finishes with the right answer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid

import pytest

from owx.canary.checkpoint import ENV_FUNCTION_ID, ENV_STORE

N = 150
KILL_AT = 60

ACTION = textwrap.dedent("""
    import sys, time
    from owx.canary.checkpoint import Checkpointer

    mode, n = sys.argv[1], int(sys.argv[2])
    with Checkpointer.from_env() as ckpt:
        restored = ckpt.restore()
        if restored:
            state, memo = restored["state"], restored["memo"]
        else:
            state, memo = {"i": 0, "total": 0}, bytearray(1_000_000)
        print("start", state["i"], flush=True)
        ckpt.register("state", state)
        ckpt.register("memo", memo)
        if mode == "implicit":
            ckpt.start_auto(0.02)
        while state["i"] < n:
            with ckpt.lock:
                i = state["i"]
                state["total"] += i * i
                memo[(i * 7919) % len(memo)] = i % 251
                state["i"] = i + 1
            if mode == "explicit" and state["i"] % 5 == 0:
                ckpt.save(f"step-{state['i']}")
            print("step", state["i"], flush=True)
            time.sleep(0.004)
        print("result", state["total"] + sum(memo), flush=True)
""")


def expected_result(n: int) -> int:
    memo = bytearray(1_000_000)
    for i in range(n):
        memo[(i * 7919) % len(memo)] = i % 251
    return sum(i * i for i in range(n)) + sum(memo)


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
@pytest.mark.parametrize("mode", ["explicit", "implicit"])
def test_killed_action_resumes_from_its_latest_checkpoint(mode, store_url, tmp_path):
    script = tmp_path / "action.py"
    script.write_text(ACTION)
    env = {**os.environ, ENV_FUNCTION_ID: f"fn-{uuid.uuid4().hex}", ENV_STORE: store_url()}
    command = [sys.executable, str(script), mode, str(N)]

    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    assert first.stdout.readline().split() == ["start", "0"]
    for line in first.stdout:
        if line.split() == ["step", str(KILL_AT)]:
            break
    os.kill(first.pid, signal.SIGKILL)
    assert first.wait() == -signal.SIGKILL

    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert second.returncode == 0, second.stderr
    lines = second.stdout.splitlines()
    resumed_at = int(lines[0].split()[1])
    if mode == "explicit":
        assert resumed_at >= KILL_AT  # the save at step 60 came before "step 60" was printed
    else:
        assert 0 < resumed_at < N  # somewhere after the first background checkpoint
    assert lines[1] == f"step {resumed_at + 1}"
    assert lines[-1] == f"result {expected_result(N)}"
    assert "owx-canary-warning" not in second.stderr


AS_OTHER_USER = textwrap.dedent("""
    import os, sys
    import owx.canary.checkpoint.kv_sqlite  # everything it needs is loaded before dropping root
    from owx.canary.checkpoint import Checkpointer

    uid, gid, step, die = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "die"
    os.setgid(gid)
    os.setuid(uid)
    ckpt = Checkpointer.from_env()
    values = ckpt.restore() or {"step": 0}
    ckpt.save(f"step-{step}", step=step, blob=bytes([step]) * 500_000)
    print("restored", values["step"], flush=True)
    if die:
        os._exit(0)  # gone before its flusher ran
    ckpt.close()
""")


def test_action_user_and_platform_user_share_the_embedded_store(tmp_path):
    """Actions run as an unprivileged user, the platform as root; a flush done by the
    platform must not lock the action out of its own checkpoint directories."""
    import pwd
    import shutil
    import tempfile
    from pathlib import Path

    from owx.canary.checkpoint import open_checkpoint_store

    nobody = pwd.getpwnam("nobody")
    base = Path(tempfile.mkdtemp(prefix="owx-ckpt-users-"))
    try:
        os.chmod(base, 0o755)
        os.chown(base, nobody.pw_uid, nobody.pw_gid)
        url = f"sqlite:///{base}/checkpoints.db?keep=3&history_s=0"
        fid = f"fn-{uuid.uuid4().hex}"
        script = base / "action.py"
        script.write_text(AS_OTHER_USER)
        env = {**os.environ, ENV_FUNCTION_ID: fid, ENV_STORE: url}

        def action(step: int, mode: str) -> subprocess.CompletedProcess:
            command = [sys.executable, str(script), str(nobody.pw_uid), str(nobody.pw_gid), str(step), mode]
            return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)

        open_checkpoint_store(url).close()  # the platform creates the store before any action runs
        first = action(1, "die")
        assert first.returncode == 0 and first.stdout == "restored 0\n" and not first.stderr, first.stderr
        with open_checkpoint_store(url) as platform:  # recovery: the platform reads (and flushes) it
            assert platform.latest(fid).values["step"] == 1
            assert platform.flush(10)
            assert platform.history(fid)[0].refs[0].location.startswith("blob:")
        second = action(2, "close")
        assert second.returncode == 0 and second.stdout == "restored 1\n", second.stderr
        assert "owx-canary-warning" not in second.stderr
        with open_checkpoint_store(url) as platform:
            latest = platform.latest(fid)
            assert latest.values == {"step": 2, "blob": bytes([2]) * 500_000}
            assert latest.info.refs[0].location.startswith("blob:")
    finally:
        shutil.rmtree(base, ignore_errors=True)
