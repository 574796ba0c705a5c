"""Whole jobs through a real owx gateway: CLI, SDK, failure recovery, history."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import requests
import yaml

from owx.disdel import sdk
from owx.disdel.estimator import MB, RuntimeCalibration
from owx.disdel.executor import JobRunner
from owx.disdel.gateway import Gateway
from owx.disdel.history import open_history
from owx.disdel.job import parse_job
from owx.disdel.settings import DisdelSettings
from owx.disdel.state import JobState
from owx.bench.gateway_process import GatewayProcess
from tests.disdel.conftest import CGROUP_PREFIX, SMALL_JOB
from tests.disdel.formats import write_csv, write_image_folder

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]  # calibration: ~2 min, much more on a loaded machine


def activations_of(gateway: GatewayProcess, name: str) -> list[dict]:
    response = requests.get(f"{gateway.url}/api/v1/namespaces/_/activations", params={"name": name, "limit": 200},
                            auth=tuple(gateway.auth.split(":", 1)), timeout=30)
    response.raise_for_status()
    return response.json()


def test_cli_submit_runs_the_job_and_status_reads_it(gateway: GatewayProcess, calibration: RuntimeCalibration,
                                                    disdel_root: Path, tmp_path: Path) -> None:
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump(SMALL_JOB))
    env = {**os.environ, "__OW_API_HOST": gateway.url, "__OW_API_KEY": gateway.auth,
           "OWX_DISDEL__SHARED_DIR": str(disdel_root), "OWX_DISDEL__POOL_MEMORY_MB": "8192",
           "OWX_DISDEL__CGROUP_PREFIX": CGROUP_PREFIX}
    done = subprocess.run([sys.executable, "-m", "owx.cli", "disdel", "submit", str(job_file)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    job_id = done.stdout.split()[1]
    shown = subprocess.run([sys.executable, "-m", "owx.cli", "disdel", "status", job_id, "--json"],
                           capture_output=True, text=True, env=env, timeout=60)
    state = JobState.model_validate_json(shown.stdout)
    assert state.status == "succeeded" and state.result is not None
    plan, result = state.plan, state.result
    assert plan.actions == 2 and plan.rounds == [1, 1]
    assert result.failed_activations == 0 and result.epochs_run == 2
    assert Path(result.model_path).is_file() and result.eval_loss is not None
    assert "train t1" in done.stderr and "epoch 2/2" in done.stderr  # live bars and the summary
    aggregate_bar = next(line for line in done.stderr.splitlines() if line.startswith("aggregate"))
    assert "1/1 succeeded" in aggregate_bar  # its one run, at the end (trainers average between rounds)
    # every training run is an ordinary activation of the job's training action
    train = [a for a in state.activations if a.role == "train"]
    assert len(train) == 4 and all(a.success for a in train)
    # between rounds the round-1 trainers averaged the round-0 models themselves: one aggregation, at the end
    assert plan.averages_in_trainers and [(a.round, a.action) for a in state.activations if a.role == "aggregate"] == [(1, "train")]
    listed = activations_of(gateway, f"disdel-{state.job_id}-train")
    on_train_action = {a.activation_id for a in state.activations if a.action == "train"}
    assert {a.activation_id for a in train} < on_train_action  # + the final aggregation, run warm there
    assert {a["activationId"] for a in listed} == on_train_action
    # its measured epoch loaded the runtime in containers of their own just before: no priming on top
    assert activations_of(gateway, f"disdel-{state.job_id}-prime") == []
    # the runtime was calibrated once, through the gateway, in containers of the action kind
    cached = json.loads((disdel_root / "calibration.json").read_text())
    measured = cached[f"python:tensorflow@{gateway.url}"]
    assert 0.8 < measured["baseline_bytes"] / calibration.baseline_bytes < 1.3
    status = subprocess.run([sys.executable, "-m", "owx.cli", "disdel", "status", state.job_id], capture_output=True,
                            text=True, env=env, timeout=60)
    assert status.returncode == 0 and "succeeded" in status.stdout and "t1" in status.stdout
    # the run taught the timeout manager: the same job now gets a history-based timeout
    settings = DisdelSettings(shared_dir=disdel_root, cgroup_prefix=CGROUP_PREFIX)
    replanned = sdk.estimate(SMALL_JOB, limits=Gateway.connect(gateway.url, gateway.auth).limits(8192), settings=settings)
    assert replanned.timeout_source == "history" and replanned.train_timeout_ms < plan.train_timeout_ms


def test_sdk_job_recovers_from_out_of_memory_and_remembers_it(gateway: GatewayProcess, calibration: RuntimeCalibration,
                                                              settings: DisdelSettings) -> None:
    """A profile-only estimate on a calibration that understates the runtime by 200 MB makes the first
    limits too small."""
    job = parse_job({**SMALL_JOB, "name": "oom", "dataset": {**SMALL_JOB["dataset"], "seed": 11}})
    wrong = calibration.model_copy(update={"baseline_bytes": calibration.baseline_bytes - 200 * MB})
    settings = settings.model_copy(update={"measure_step": False})
    client = Gateway.connect(gateway.url, gateway.auth)
    history = open_history(settings.root())
    runner = JobRunner(job, client, settings, history, wrong, client.limits(8192))
    handle = sdk.JobHandle(runner)
    seen_running = False
    while not handle.done():
        seen_running |= sdk.status(handle.job_id, settings).status == "running"
        time.sleep(0.2)
    state = handle.wait()
    assert seen_running
    assert state.status == "succeeded", state.message
    failed = [a for a in state.activations if not a.success]
    assert failed and all(a.failure == "oom" for a in failed)
    assert state.result.failed_activations == len(failed)
    # the training action's own limit: its trainers' and the final aggregation's, which runs on it (and
    # may run out too: the estimate understates every step)
    retried = max(a.memory_mb for a in state.activations if a.action == "train")
    assert retried > state.plan.train_memory_mb
    record = history.get(job.signature())
    assert record.memory_floor_mb == retried and record.failures[0].kind == "oom"
    # not measured, the job loaded the runtime in a container of its own before its actions
    primed = activations_of(gateway, f"disdel-{state.job_id}-prime")
    assert len(primed) == 1 and primed[0]["start"] <= min(a.start for a in state.activations)
    # the next plan of the same job starts at the memory that worked
    again = JobRunner(job, client, settings, history, wrong, client.limits(8192))
    plan, _ = again._prepare()
    assert plan.train_memory_mb >= retried


def test_cli_trains_a_users_keras_model_on_csv_data(gateway: GatewayProcess, disdel_root: Path, tmp_path: Path) -> None:
    import keras

    write_csv(tmp_path / "data.csv", 1200, features=6, classes=3)
    inputs = keras.Input((6,))
    model = keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(keras.layers.Dense(32, activation="relu")(inputs)))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.save(tmp_path / "model.keras")
    job = {"name": "csv", "model": {"kind": "keras", "path": "model.keras"},
           "dataset": {"kind": "csv", "path": "data.csv", "label": "label"}, "batch_size": 32, "epochs": 3,
           "eval_samples": 200}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    env = {**os.environ, "__OW_API_HOST": gateway.url, "__OW_API_KEY": gateway.auth,
           "OWX_DISDEL__SHARED_DIR": str(disdel_root), "OWX_DISDEL__CGROUP_PREFIX": CGROUP_PREFIX}
    done = subprocess.run([sys.executable, "-m", "owx.cli", "disdel", "submit", str(tmp_path / "job.yaml"), "--json"],
                          capture_output=True, text=True, env=env, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    state = JobState.model_validate_json(done.stdout[done.stdout.index("{"):])
    assert state.status == "succeeded" and state.result.failed_activations == 0
    assert state.plan.train_memory_mb <= 2048  # the node's pool, read from the gateway
    assert state.result.eval_accuracy > 0.7  # three classes: chance is 0.33
    trained = keras.models.load_model(state.result.model_path)
    assert trained.predict(np.zeros((2, 6), np.float32), verbose=0).shape == (2, 3)
    assert all(a.peak_bytes <= a.memory_mb * MB for a in state.activations if a.peak_bytes)


def test_sdk_trains_an_in_memory_model_on_an_image_folder(gateway: GatewayProcess, settings: DisdelSettings,
                                                          tmp_path: Path) -> None:
    import keras

    root = write_image_folder(tmp_path / "images", per_class=120, size=12)
    inputs = keras.Input((12, 12, 3))
    x = keras.layers.Conv2D(8, 3, activation="relu")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.GlobalMaxPooling2D()(x)))  # uncompiled, logits
    handle = sdk.submit(model=model, data={"kind": "images", "path": str(root)}, name="images", batch_size=16,
                        epochs=4, eval_samples=60, learning_rate=0.01, gateway=Gateway.connect(gateway.url, gateway.auth),
                        settings=settings)
    state = handle.wait(900)
    assert state.status == "succeeded", state.message
    assert state.result.eval_accuracy > 0.7 and state.result.failed_activations == 0
    assert sum(state.plan.shard_samples) + 60 == 360


def test_a_job_that_cannot_fit_fails_before_it_starts_saying_what_to_raise(gateway: GatewayProcess,
                                                                         settings: DisdelSettings) -> None:
    job = parse_job({**SMALL_JOB, "name": "huge", "model": "resnet", "batch_size": 65_536, "actions": 2,
                     "dataset": {**SMALL_JOB["dataset"], "shape": [96, 96, 3]}})
    client = Gateway.connect(gateway.url, gateway.auth)
    state = sdk.JobHandle(JobRunner(job, client, settings, open_history(settings.root()),
                                    sdk.calibrate(client, settings, client.limits(8192)), client.limits(8192))).wait(600)
    assert state.status == "failed" and not state.activations
    assert "OWX_PLATFORM__USER_MEMORY_MB, one node's container memory (now 2048), to" in state.message
    assert "OWX_LIMITS__MEMORY_MB__MAX to" in state.message  # the gateway's 4096 is capped at the node's 2048
