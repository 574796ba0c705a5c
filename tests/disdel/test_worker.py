"""The training and aggregation actions' code, run in child processes inside real cgroups."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from owx.disdel import data, weights
from owx.disdel.isolated import run_isolated
from owx.disdel.job import SyntheticDataset
from tests.disdel.conftest import CGROUP_PREFIX

MODEL = {"builtin": "small_cnn", "shape": [16, 16, 3], "classes": 4, "learning_rate": 0.001}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("worker")
    x, y = data.synthetic(SyntheticDataset(samples=600, shape=(16, 16, 3), classes=4, noise=2.0, seed=5))
    data.write_npz(directory / "eval.npz", x[500:], y[500:])
    return data.write_npz(directory / "shard.npz", x[:500], y[:500])


def train_params(shard: Path, key: str, **extra: object) -> dict:
    return {"key": key, "job_id": "w", "model": MODEL, "shard": str(shard), "out_weights": str(shard.parent / f"{key}.npz"),
            "progress": str(shard.parent / f"{key}.json"), "epochs": 3, "batch_size": 32, "threads": 1, **extra}


def test_training_learns_reports_progress_and_its_own_peak(shard: Path) -> None:
    run = run_isolated("train", train_params(shard, "a"), prefix=CGROUP_PREFIX)
    assert run.ok, run.stderr
    result = run.result
    assert result["epochs_run"] == 3 and result["samples"] == 500
    assert result["losses"][-1] < result["losses"][0]
    assert json.loads((shard.parent / "a.json").read_text())["epoch"] == 3
    # the action measured its own container (the cgroup we made), as the benchmark relies on
    assert 0.9 * run.peak_bytes <= result["peak_memory_bytes"] <= run.peak_bytes
    assert result["memory"] and result["phases"]["fit_done"] >= result["phases"]["model_ready"]
    assert len(weights.load(result["weights"])) == 8


def test_training_stops_early_at_the_target_loss(shard: Path) -> None:
    run = run_isolated("train", train_params(shard, "b", target_loss=50.0, epoch_offset=4), prefix=CGROUP_PREFIX)
    assert run.ok, run.stderr
    assert run.result["epochs_run"] == 1 and run.result["stopped_early"]
    assert json.loads((shard.parent / "b.json").read_text())["epoch"] == 5


def test_a_retried_action_resumes_from_its_epoch_checkpoint(shard: Path) -> None:
    store = f"sqlite://{shard.parent / 'ckpt.db'}"
    first = run_isolated("train", train_params(shard, "c", epochs=2, checkpoint_store=store), prefix=CGROUP_PREFIX)
    assert first.ok, first.stderr
    # the same action again with more epochs: the two done are restored, only the third runs
    again = run_isolated("train", train_params(shard, "c", epochs=3, checkpoint_store=store), prefix=CGROUP_PREFIX)
    assert again.ok, again.stderr
    assert again.result["resumed_from_epoch"] == 2
    assert again.result["losses"][:2] == first.result["losses"]
    assert len(again.result["losses"]) == 3


def test_an_action_out_of_memory_is_killed_by_its_cgroup(shard: Path) -> None:
    run = run_isolated("train", train_params(shard, "d"), prefix=CGROUP_PREFIX, memory_limit=120 * 1024 * 1024)
    assert not run.ok and run.oom_kills >= 1


def test_aggregation_averages_evaluates_and_saves_a_loadable_model(shard: Path) -> None:
    directory = shard.parent
    a = run_isolated("train", train_params(shard, "e", epochs=1), prefix=CGROUP_PREFIX).result
    b_params = train_params(shard, "f", epochs=1, init_weights=a["weights"])
    b = run_isolated("train", b_params, prefix=CGROUP_PREFIX).result
    params = {"key": "agg", "job_id": "w", "inputs": [{"weights": a["weights"], "samples": 100},
                                                        {"weights": b["weights"], "samples": 300}],
              "out_weights": str(directory / "avg.npz"), "model": MODEL, "evaluate": str(directory / "eval.npz"),
              "save_model": str(directory / "models" / "m.keras")}
    run = run_isolated("aggregate", params, prefix=CGROUP_PREFIX)
    assert run.ok, run.stderr
    expected = weights.weighted_average([weights.load(a["weights"]), weights.load(b["weights"])], [100, 300])
    assert all(np.allclose(p, q) for p, q in zip(weights.load(directory / "avg.npz"), expected))
    assert run.result["samples"] == 400 and 0 < run.result["eval_loss"] < 10
    assert 0 <= run.result["eval_accuracy"] <= 1
    assert Path(run.result["model_path"]).stat().st_size > 0


def test_training_can_start_from_the_weighted_average_of_the_last_rounds_models(shard: Path) -> None:
    directory = shard.parent
    a = run_isolated("train", train_params(shard, "g", epochs=1), prefix=CGROUP_PREFIX).result["weights"]
    doubled = weights.save(directory / "doubled.npz", [2 * w for w in weights.load(a)])
    frozen = {**MODEL, "learning_rate": 1e-12}  # one epoch that leaves the starting weights as they were
    params = train_params(shard, "h", epochs=1, model=frozen,
                          init_average=[{"weights": a, "samples": 100}, {"weights": str(doubled), "samples": 300}])
    run = run_isolated("train", params, prefix=CGROUP_PREFIX)
    assert run.ok, run.stderr
    expected = [1.75 * w for w in weights.load(a)]
    assert all(np.allclose(p, q, atol=1e-6) for p, q in zip(weights.load(run.result["weights"]), expected))


def test_bad_parameters_are_an_error_result_not_a_crash(shard: Path) -> None:
    run = run_isolated("train", {"key": "x y", "epochs": 0}, prefix=CGROUP_PREFIX)
    assert run.ok and run.result["error"].startswith("invalid parameters:")
    assert "epochs" in run.result["error"] and "job_id" in run.result["error"]
