"""The benchmark's single-action environment trains a model in a sandboxed action from the data the
bench prepares: where the bench writes it, the action can read it and write its weights."""

from __future__ import annotations

import math
from pathlib import Path

from owx.bench.disdel.runs import builtin_model, inputs, single_action
from owx.bench.gateway_process import GatewayProcess
from owx.disdel.gateway import Gateway
from owx.disdel.job import parse_job
from tests.disdel.conftest import SMALL_JOB


def test_the_single_action_run_trains_on_the_benchs_data_and_scores_its_model(gateway: GatewayProcess,
                                                                             disdel_root: Path) -> None:
    job = parse_job({**SMALL_JOB, "epochs": 1})
    job_dir, shard, eval_set, _ = inputs(disdel_root, job)
    run = single_action(Gateway.connect(gateway.url, gateway.auth), job_dir, builtin_model(job), shard, eval_set,
                        job.epochs, job.batch_size, 1024, 300_000)
    assert run.eval_loss is not None and math.isfinite(run.eval_loss)
    assert (job_dir / "single.npz").stat().st_size > 0  # the weights the action wrote
