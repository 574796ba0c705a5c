"""Whole jobs through a real owx gateway: CLI, SDK, failure recovery, history."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

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
from owx.bench.disdel.gateway import PrivateGateway
from tests.disdel.conftest import CGROUP_PREFIX, SMALL_JOB

pytestmark = pytest.mark.slow


def activations_of(gateway: PrivateGateway, name: str) -> list[dict]:
    response = requests.get(f"{gateway.url}/api/v1/namespaces/_/activations", params={"name": name, "limit": 200},
                            auth=tuple(gateway.auth.split(":", 1)), timeout=30)
    response.raise_for_status()
    return response.json()


def test_cli_submit_runs_the_job_and_status_reads_it(gateway: PrivateGateway, calibration: RuntimeCalibration,
                                                    disdel_root: Path, tmp_path: Path) -> None:
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump(SMALL_JOB))
    env = {**os.environ, "__OW_API_HOST": gateway.url, "__OW_API_KEY": gateway.auth,
           "OWX_DISDEL_SHARED_DIR": str(disdel_root), "OWX_DISDEL_POOL_MEMORY_MB": "8192",
           "OWX_DISDEL_CGROUP_PREFIX": CGROUP_PREFIX}
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
    # every training run is an ordinary activation of the job's training action
    train = [a for a in state.activations if a.role == "train"]
    assert len(train) == 4 and all(a.success for a in train)
    # between rounds the round-1 trainers averaged the round-0 models themselves: one aggregation, at the end
    assert plan.averages_in_trainers and [(a.round, a.action) for a in state.activations if a.role == "aggregate"] == [(1, "train")]
    listed = activations_of(gateway, f"disdel-{state.job_id}-train")
    on_train_action = {a.activation_id for a in state.activations if a.action == "train"}
    assert {a.activation_id for a in train} < on_train_action  # + the final aggregation, run warm there
    assert {a["activationId"] for a in listed} == on_train_action
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


def test_sdk_job_recovers_from_out_of_memory_and_remembers_it(gateway: PrivateGateway, calibration: RuntimeCalibration,
                                                              settings: DisdelSettings) -> None:
    """A calibration that understates the runtime by 200 MB makes the first limits too small."""
    job = parse_job({**SMALL_JOB, "name": "oom", "dataset": {**SMALL_JOB["dataset"], "seed": 11}})
    wrong = calibration.model_copy(update={"baseline_bytes": calibration.baseline_bytes - 200 * MB})
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
    retried = max(a.memory_mb for a in state.activations if a.role == "train")
    assert retried > state.plan.train_memory_mb
    record = history.get(job.signature())
    assert record.memory_floor_mb == retried and record.failures[0].kind == "oom"
    # the next plan of the same job starts at the memory that worked
    again = JobRunner(job, client, settings, history, wrong, client.limits(8192))
    plan, _ = again._prepare()
    assert plan.train_memory_mb >= retried
