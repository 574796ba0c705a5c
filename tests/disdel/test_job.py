from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from owx.disdel.job import JobError, load_job, parse_job
from owx.disdel.messages import TrainParams
from tests.disdel.conftest import SMALL_JOB


def test_yaml_job_loads_with_defaults(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("model: resnet\ndataset: {kind: synthetic, samples: 500, shape: [16, 16, 1], classes: 3}\n"
                    "batch_size: 16\nepochs: 3\ntarget_loss: 0.2\nexpected_cost: 0.01\n")
    job = load_job(path)
    assert (job.model.name, job.batch_size, job.epochs, job.target_loss, job.expected_cost) == ("resnet", 16, 3, 0.2, 0.01)
    assert job.held_out(500) == 50 and job.held_out(100_000) == 1000


def test_every_problem_is_named(tmp_path: Path) -> None:
    bad = {**SMALL_JOB, "model": "vgg", "batch_size": 0,
           "dataset": {"kind": "synthetic", "samples": 10, "shape": [4, 4, 1], "classes": 1}}
    with pytest.raises(JobError) as info:
        parse_job(bad)
    message = str(info.value)
    for where in ("model.builtin.name:", "batch_size:", "dataset.synthetic.shape:", "dataset.synthetic.classes:"):
        assert where in message


def test_unknown_field_and_missing_fields() -> None:
    with pytest.raises(JobError, match="epochs: Field required"):
        parse_job({k: v for k, v in SMALL_JOB.items() if k != "epochs"})
    with pytest.raises(JobError, match="learning_rat: Extra inputs"):
        parse_job({**SMALL_JOB, "learning_rat": 0.1})


def test_npz_dataset_path_is_relative_to_the_job_file(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", x=np.zeros((20, 8, 8, 1), np.float32), y=np.arange(20) % 2)
    (tmp_path / "job.yaml").write_text("model: small_cnn\ndataset: {kind: npz, path: d.npz}\nbatch_size: 4\nepochs: 1\n")
    assert load_job(tmp_path / "job.yaml").dataset.path == (tmp_path / "d.npz").resolve()
    (tmp_path / "bad.yaml").write_text("model: small_cnn\ndataset: {kind: npz, path: nope.npz}\nbatch_size: 4\nepochs: 1\n")
    with pytest.raises(JobError, match="does not exist"):
        load_job(tmp_path / "bad.yaml")


def test_unreadable_job_files(tmp_path: Path) -> None:
    with pytest.raises(JobError, match="cannot read job file"):
        load_job(tmp_path / "missing.yaml")
    (tmp_path / "x.yaml").write_text("model: [unclosed\n")
    with pytest.raises(JobError, match="not valid YAML"):
        load_job(tmp_path / "x.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(JobError, match="expected a mapping"):
        load_job(tmp_path / "list.yaml")


def test_signature_depends_on_model_data_and_batch() -> None:
    base = parse_job(SMALL_JOB)
    assert base.signature() == parse_job({**SMALL_JOB, "epochs": 9}).signature()
    assert base.signature() != parse_job({**SMALL_JOB, "batch_size": 64}).signature()
    assert base.signature() != parse_job({**SMALL_JOB, "model": "resnet"}).signature()
    other_data = {**SMALL_JOB, "dataset": {**SMALL_JOB["dataset"], "seed": 4}}
    assert base.signature() != parse_job(other_data).signature()


def test_a_training_action_starts_from_one_model_or_one_average_not_both() -> None:
    params = {"key": "r1-t0", "job_id": "j", "model": {"builtin": "small_cnn", "shape": [8, 8, 1], "classes": 2,
              "learning_rate": 0.1}, "shard": "s.npz", "out_weights": "o.npz", "progress": "p.json", "epochs": 1,
              "batch_size": 2, "init_average": [{"weights": "a.npz", "samples": 10}]}
    assert TrainParams.model_validate(params).init_average[0].samples == 10
    with pytest.raises(ValidationError, match="init_weights or init_average, not both"):
        TrainParams.model_validate({**params, "init_weights": "w.npz"})
