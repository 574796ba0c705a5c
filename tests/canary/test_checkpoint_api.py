"""The checkpoint API inside an action: explicit and implicit mode, and mistakes in its use."""

from __future__ import annotations

import io
import threading
import time
import uuid

import numpy as np
import pytest

from owx.canary.checkpoint import (
    ENV_FUNCTION_ID,
    ENV_INTERVAL,
    ENV_STORE,
    WARNING_PREFIX,
    Checkpointer,
    CheckpointTooLarge,
    InvalidCheckpoint,
    open_checkpoint_store,
)
from tests.fixtures.polling import wait_for


@pytest.fixture
def env(store_url) -> dict[str, str]:
    return {ENV_FUNCTION_ID: f"fn-{uuid.uuid4().hex}", ENV_STORE: store_url(keep=3, history_s=0)}


def test_explicit_save_and_restore_across_activations(env):
    weights = np.ones((128, 1024))
    with Checkpointer.from_env(env) as first:
        assert first.enabled and first.restore() is None
        first.register("weights", weights)  # mutable: captured at each save
        first.save("epoch-1", epoch=1)
        weights *= 2
        info = first.save("epoch-2", epoch=2)
        assert info.state == "epoch-2" and first.last_saved == info
    with Checkpointer.from_env(env) as second:
        values = second.restore()
        assert second.restored.state == "epoch-2" and values["epoch"] == 2
        np.testing.assert_array_equal(values["weights"], np.full((128, 1024), 2.0))
        second.save("epoch-3", epoch=3)  # restored values stay registered
    with open_checkpoint_store(env[ENV_STORE]) as store:
        latest = store.latest(env[ENV_FUNCTION_ID])
        assert latest.state == "epoch-3" and set(latest.values) == {"weights", "epoch"}
        assert all(ref.location.startswith("blob:") for ref in latest.info.refs)  # flushed on close


def test_malformed_calls_raise_to_the_action_and_keep_the_previous_checkpoint(env):
    with Checkpointer.from_env(env) as ckpt:
        ckpt.save("good", x=1)
        with pytest.raises(InvalidCheckpoint, match="checkpoint value name must be a non-empty string, got 3"):
            ckpt.register(3, "value")
        with pytest.raises(InvalidCheckpoint, match="checkpoint value 'fn' of type function cannot be serialized"):
            ckpt.save("bad", fn=lambda: 1)
        with pytest.raises(InvalidCheckpoint, match="checkpoint state must be a non-empty string, got None"):
            ckpt.save(None, x=2)
        ckpt.register("handle", threading.Lock())
        with pytest.raises(InvalidCheckpoint, match="'handle' of type lock"):
            ckpt.save("bad-registered")
        ckpt.unregister("handle")
        assert ckpt.restore() == {"x": 1}


def test_oversized_state_raises_to_the_action(store_url):
    env = {ENV_FUNCTION_ID: "fn-" + uuid.uuid4().hex, ENV_STORE: store_url(max_bytes="64KiB")}
    with Checkpointer.from_env(env) as ckpt:
        ckpt.save("small", data=b"x" * 1000)
        with pytest.raises(CheckpointTooLarge, match="over the store's limit of 65536 bytes"):
            ckpt.save("big", data=b"x" * 100_000)
        assert ckpt.restore() == {"data": b"x" * 1000}


def test_implicit_mode_checkpoints_registered_state_in_the_background(env):
    with Checkpointer.from_env(env) as ckpt:
        state = {"a": 0, "b": 0}
        ckpt.register("state", state)
        ckpt.start_auto(interval_s=0.02)
        deadline = time.monotonic() + 10  # five checkpoints take ~0.1 s; a loaded machine may take longer
        while time.monotonic() < deadline and (ckpt.last_saved is None or ckpt.last_saved.seq < 5):
            with ckpt.lock:  # both fields change together as far as checkpoints can tell
                state["a"] += 1
                time.sleep(0.0005)
                state["b"] -= 1
        ckpt.stop_auto()
        saved = ckpt.last_saved
    with open_checkpoint_store(env[ENV_STORE]) as store:
        history = store.history(env[ENV_FUNCTION_ID])
        assert saved.seq >= 5 and history[0].seq == saved.seq
        for info in history:
            s = store.load(env[ENV_FUNCTION_ID], info.seq).values["state"]
            assert s["a"] == -s["b"] and info.state == "auto"
        assert store.latest(env[ENV_FUNCTION_ID]).values["state"]["a"] > 0


def test_implicit_mode_with_a_snapshot_function(env):
    with Checkpointer.from_env(env) as ckpt:
        counter = [0]
        ckpt.start_auto(0.02, snapshot=lambda: {"count": counter[0]}, state="tick")
        deadline = time.monotonic() + 10  # two checkpoints take ~0.04 s; a loaded machine may take longer
        while time.monotonic() < deadline and (ckpt.last_saved is None or ckpt.last_saved.seq < 2):
            counter[0] += 1
            time.sleep(0.005)
    with Checkpointer.from_env(env) as again:
        assert again.restore()["count"] > 0 and again.restored.state == "tick"


def test_implicit_mode_reports_mistakes(env):
    with Checkpointer.from_env(env) as ckpt:
        with pytest.raises(InvalidCheckpoint, match="'bad' of type function"):
            ckpt.start_auto(1.0, snapshot=lambda: {"bad": lambda: 0})
        with pytest.raises(ValueError, match="positive number of seconds"):
            ckpt.start_auto(0)
        box = {"value": 1}
        ckpt.start_auto(0.02, snapshot=lambda: dict(box))
        box["value"] = threading.Lock()  # becomes unserializable while running
        wait_for(lambda: any(w.startswith("automatic checkpoints stopped") for w in ckpt.warnings), timeout=10,
                 what="the background checkpoints to stop on the unserializable value")
        with pytest.raises(InvalidCheckpoint, match="'value' of type lock"):
            ckpt.stop_auto()
        assert any(w.startswith("automatic checkpoints stopped") for w in ckpt.warnings)
        assert ckpt.restore() == {"value": 1}


def test_without_configuration_the_action_runs_without_checkpoints():
    stderr = io.StringIO()
    with Checkpointer.from_env({ENV_INTERVAL: "soon"}, stderr=stderr) as ckpt:
        assert not ckpt.enabled
        assert ckpt.restore() is None
        assert ckpt.save("s", x=1) is None
        with pytest.raises(InvalidCheckpoint):
            ckpt.save("s", f=lambda: 0)  # mistakes are still mistakes
    lines = stderr.getvalue().splitlines()
    assert lines == [WARNING_PREFIX + w for w in ckpt.warnings] and len(lines) == 2
    assert "ignoring __OW_CANARY_INTERVAL='soon'" in lines[0]
    assert "checkpoints disabled: __OW_CANARY_FUNCTION_ID and __OW_CANARY_STORE are not both set" in lines[1]


def test_interval_comes_from_the_runtime(env):
    with Checkpointer.from_env({**env, ENV_INTERVAL: "0.25"}) as ckpt:
        assert ckpt.interval_s == 0.25


def test_the_runtime_stops_implicit_checkpoints_when_the_activation_ends(env):
    from owx.canary.checkpoint import close_all

    ckpt = Checkpointer.from_env(env)  # an action that forgot to close its checkpointer
    counter = {"n": 0}
    ckpt.start_auto(0.01, snapshot=lambda: dict(counter))
    time.sleep(0.05)
    close_all()
    assert not ckpt.enabled
    with open_checkpoint_store(env[ENV_STORE]) as store:
        last = store.latest(env[ENV_FUNCTION_ID]).seq
        time.sleep(0.1)
        assert store.latest(env[ENV_FUNCTION_ID]).seq == last  # nothing written after the end
