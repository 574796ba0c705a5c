"""Planner, timeout manager and failure manager on fixed inputs (no TensorFlow needed)."""

from __future__ import annotations

import math

import pytest

from owx.disdel.data import DatasetInfo
from owx.disdel.estimator import MB, MeasuredStep, MemoryEstimator, RuntimeCalibration
from owx.disdel.failures import FailureManager, LimitsExhausted, classify
from owx.disdel.history import FailureRecord, HistoryRecord
from owx.disdel.job import parse_job
from owx.disdel.action_bounds import ActionBounds
from owx.disdel.model_profile import ModelProfile
from owx.disdel.planner import PlanError, PlanInputs, Planner
from owx.disdel.timeouts import TimeoutManager
from owx.platform.types import OOM_MESSAGE, TIMEOUT_MESSAGE
from tests.disdel.conftest import SMALL_JOB

CALIBRATION = RuntimeCalibration(runtime="t", baseline_bytes=300 * MB, light_baseline_bytes=40 * MB, baseline_layers=2,
                                 per_layer_bytes=3 * MB, state_factor=1.5, embedding_factor=2.3,
                                 activation_factor={"dense": 1.1, "conv": 2.0, "recurrent": 2.4},
                                 data_factor=2.7, warm_data_factor=3.0, safety=1.1)
PROFILE = ModelProfile(name="small_cnn", params=545_098, weights_bytes=4 * 545_098, state_bytes=16 * 545_098,
                       activation_bytes={"dense": 4 * 138, "conv": 4 * 61_440, "recurrent": 0}, layers=7)
LIMITS = ActionBounds(memory_min_mb=128, memory_max_mb=1024, timeout_min_ms=100, timeout_max_ms=300_000, node_memory_mb=2048)
SAMPLE_BYTES = 32 * 32 * 3 * 4 + 4


def planner(limits: ActionBounds = LIMITS, cluster_size: int = 4, sync_every: int = 1) -> Planner:
    return Planner(MemoryEstimator(CALIBRATION), limits, TimeoutManager(limits, 1e-5), cluster_size, sync_every)


def inputs(samples: int, **job: object) -> PlanInputs:
    request = parse_job({**SMALL_JOB, **job})
    return PlanInputs(request, DatasetInfo(samples, (32, 32, 3), 10, SAMPLE_BYTES), PROFILE, 100)


def test_estimate_parts_add_up() -> None:
    estimate = MemoryEstimator(CALIBRATION).training(PROFILE, 32, 1000, SAMPLE_BYTES)
    assert estimate.graph == 5 * 3 * MB
    assert estimate.model_state == int(1.5 * 16 * PROFILE.params)
    assert estimate.activations == int(32 * (1.1 * 4 * 138 + 2.0 * 4 * 61_440))
    assert estimate.data == int(2.7 * 1000 * SAMPLE_BYTES)
    variable = estimate.graph + estimate.model_state + estimate.activations + estimate.data
    assert estimate.total == int(1.1 * (300 * MB + variable))
    warm = MemoryEstimator(CALIBRATION).training(PROFILE, 32, 1000, SAMPLE_BYTES, warm=True)
    assert warm.data == int(3.0 * 1000 * SAMPLE_BYTES)
    # a batch larger than the shard trains on the shard
    assert MemoryEstimator(CALIBRATION).training(PROFILE, 4096, 100, SAMPLE_BYTES).activations == \
        MemoryEstimator(CALIBRATION).training(PROFILE, 100, 100, SAMPLE_BYTES).activations


def test_a_measured_model_is_extrapolated_along_the_line_through_its_two_peaks() -> None:
    """With the job's model measured on two parts of its data, the estimate follows that model's own
    growth per sample (not the runtime's data factor), never less than the sample itself."""
    step = MeasuredStep(peak_bytes=400 * MB, samples=500, more_peak_bytes=420 * MB, more_samples=1000, batch=32)
    estimator = MemoryEstimator(CALIBRATION)
    at_shard = estimator.training(PROFILE, 32, 3000, SAMPLE_BYTES, step=step)
    assert at_shard.measured == 100 * MB and at_shard.data == int(20 * MB / 500 * 2500)
    assert at_shard.total == int(1.1 * (400 * MB + 20 * MB / 500 * 2500))
    assert estimator.training(PROFILE, 32, 400, SAMPLE_BYTES, step=step).data == 0  # the smaller part covers it
    shrunk = step.model_copy(update={"more_peak_bytes": 390 * MB})  # the allocator returned memory: noise
    assert estimator.training(PROFILE, 32, 3000, SAMPLE_BYTES, step=shrunk).data == 2500 * SAMPLE_BYTES
    warm = estimator.training(PROFILE, 32, 3000, SAMPLE_BYTES, warm=True, step=step)
    assert warm.data == int(20 * MB / 500 * 2500 + (3.0 - 2.7) * 3000 * SAMPLE_BYTES)
    other_batch = estimator.training(PROFILE, 64, 3000, SAMPLE_BYTES, step=step)  # measured at 32: the profile
    assert other_batch.measured == 0 and other_batch.data == int(2.7 * 3000 * SAMPLE_BYTES)


def test_two_actions_when_they_fit() -> None:
    plan = planner().plan(inputs(4100))
    assert plan.actions == 2 and plan.shard_samples == [2000, 2000]
    assert plan.train_memory_mb * MB >= plan.train_estimate_bytes
    assert plan.tree == [[[0, 1]]] and plan.rounds == [1, 1]
    # the evaluating final aggregation fits a training container, so the aggregator only averages
    assert plan.final_on_trainer and plan.final_estimate_bytes <= plan.train_memory_mb * MB
    assert plan.aggregate_estimate_bytes < 100 * MB < plan.final_estimate_bytes
    # so the trainers can average between rounds themselves
    assert plan.averages_in_trainers


def test_actions_grow_by_the_papers_rule_until_each_fits() -> None:
    p = planner()
    estimator = MemoryEstimator(CALIBRATION)
    request = inputs(60_100)
    expected, m_e = 2, estimator.training(PROFILE, 32, 30_000, SAMPLE_BYTES, warm=True).total
    while m_e > 1024 * MB:
        expected += math.ceil((m_e - 1024 * MB) / (1024 * MB))
        m_e = estimator.training(PROFILE, 32, math.ceil(60_000 / expected), SAMPLE_BYTES, warm=True).total
    actions, estimate = p.choose_actions(request)
    assert actions == expected > 2
    assert estimate.total <= 1024 * MB
    plan = p.plan(request)
    assert sum(plan.shard_samples) == 60_000 and max(plan.shard_samples) - min(plan.shard_samples) <= 1
    assert plan.concurrent == min(plan.actions, 2048 // plan.train_memory_mb)


def test_a_model_that_cannot_fit_is_refused_with_the_limit_to_raise() -> None:
    small = ActionBounds(128, 256, 100, 300_000, 2048)
    with pytest.raises(PlanError, match="OWX_LIMITS__MEMORY_MB__MAX"):
        planner(small).plan(inputs(4100))


def test_forced_action_count_that_does_not_fit_is_refused() -> None:
    with pytest.raises(PlanError, match="use more actions"):
        planner().plan(inputs(60_100, actions=2))


def test_aggregation_tree_adds_levels_when_one_aggregator_cannot_hold_all() -> None:
    huge = ModelProfile(name="big", params=12_000_000, weights_bytes=48_000_000, state_bytes=192_000_000,
                        activation_bytes={"dense": 4000, "conv": 0, "recurrent": 0}, layers=8)
    limits = ActionBounds(128, 1024, 100, 300_000, 64_000)
    request = PlanInputs(parse_job({**SMALL_JOB, "actions": 12}), DatasetInfo(12_100, (32, 32, 3), 10, SAMPLE_BYTES), huge, 100)
    plan = planner(limits, cluster_size=8).plan(request)
    assert 2 <= plan.fan_in_max < 12
    assert plan.levels >= 2 and len(plan.tree[-1]) == 1
    covered = sorted(i for group in plan.tree[0] for i in group)
    assert covered == list(range(12))
    assert all(len(group) <= plan.fan_in_max for level in plan.tree for group in level)
    assert plan.aggregate_memory_mb * MB >= plan.aggregate_estimate_bytes
    assert not plan.averages_in_trainers  # no training action holds all twelve models


def test_rounds_follow_sync_every() -> None:
    assert planner(sync_every=2).plan(inputs(4100, epochs=5)).rounds == [2, 2, 1]
    assert planner(sync_every=0).plan(inputs(4100, epochs=5)).rounds == [5]


def test_timeouts_from_history_cost_or_maximum() -> None:
    manager = TimeoutManager(LIMITS, unit_price_gb_s=1e-5, margin=1.5, minimum_ms=1000)
    history = HistoryRecord(signature="s", sec_per_sample_epoch=0.001, startup_s=5.0)
    choice = manager.training(history, samples=10_000, epochs=2, actions=2, memory_mb=512, expected_cost=None)
    assert (choice.ms, choice.source) == (int(1.5 * (5 + 20) * 1000), "history")
    floored = history.model_copy(update={"timeout_floor_ms": 90_000})
    assert manager.training(floored, 10_000, 2, 2, 512, None).ms == 90_000
    cost = manager.training(None, 10_000, 2, actions=4, memory_mb=512, expected_cost=0.002)
    assert cost.source == "expected cost" and cost.ms == math.ceil(1000 * (0.002 / 4) / (1e-5 * 0.5))
    assert manager.training(None, 10_000, 2, 2, 512, expected_cost=10.0).ms == LIMITS.timeout_max_ms
    assert manager.training(None, 10_000, 2, 2, 512, None).source == "platform maximum"


def record(result: object, success: bool = False, duration: int = 10, timeout: int = 60_000) -> dict:
    return {"response": {"success": success, "result": result}, "duration": duration,
            "annotations": [{"key": "limits", "value": {"timeout": timeout, "memory": 256}}]}


def test_failures_are_told_apart_from_activation_records() -> None:
    assert classify(record({"ok": 1}, success=True)) is None
    assert classify(record({"error": OOM_MESSAGE})).cause == "oom"
    assert classify(record({"error": TIMEOUT_MESSAGE.format(ms=60000)})).cause == "timeout"
    assert classify(record({"error": "killed"}, duration=60_000)).cause == "timeout"
    assert classify(record({"error": "ZeroDivisionError"})).cause == "error"


def test_failure_manager_raises_the_right_limit_up_to_the_maximum() -> None:
    manager = FailureManager(LIMITS, oom_growth=1.5, timeout_growth=2.0)
    oom, slow = classify(record({"error": OOM_MESSAGE})), classify(record({"error": TIMEOUT_MESSAGE.format(ms=1)}))
    assert manager.adjust(oom, 400, 60_000) == type(manager.adjust(oom, 400, 60_000))(600, 60_000)
    assert manager.adjust(oom, 900, 60_000).memory_mb == 1024
    assert manager.adjust(slow, 400, 200_000).timeout_ms == 300_000
    with pytest.raises(LimitsExhausted, match="OWX_LIMITS__MEMORY_MB__MAX"):
        manager.adjust(oom, 1024, 60_000)
    with pytest.raises(LimitsExhausted, match="OWX_LIMITS__TIMEOUT_MS__MAX"):
        manager.adjust(slow, 400, 300_000)
    with pytest.raises(LimitsExhausted, match="other limits cannot fix"):
        manager.adjust(classify(record({"error": "bug"})), 400, 1000)


def test_a_measured_peak_on_the_same_shard_size_raises_the_limit() -> None:
    request = inputs(4100)
    base = planner().plan(request)
    history = HistoryRecord(signature="s", peak_bytes_per_action=base.train_estimate_bytes + 50 * MB, samples_per_action=2000)
    again = planner().plan(PlanInputs(request.job, request.data, request.profile, 100, history))
    assert again.train_estimate_bytes == history.peak_bytes_per_action
    assert again.train_memory_mb >= base.train_memory_mb + 50
    other_size = history.model_copy(update={"samples_per_action": 1000})
    assert planner().plan(PlanInputs(request.job, request.data, request.profile, 100, other_size)).train_memory_mb == base.train_memory_mb


def test_history_floors_after_failures_raise_the_next_plan() -> None:
    history = HistoryRecord(signature="s").with_failure(FailureRecord(kind="oom", role="train", memory_mb=400, timeout_ms=1), 700)
    request = inputs(4100)
    plan = planner().plan(PlanInputs(request.job, request.data, request.profile, 100, history))
    assert plan.train_memory_mb == 700


def test_the_nodes_pool_bounds_an_action_and_the_message_names_the_setting_and_value() -> None:
    info = {"limits": {"min_action_memory": 128 * MB, "max_action_memory": 4096 * MB, "min_action_duration": 100,
                       "max_action_duration": 300_000, "node_memory": 512 * MB, "pool_memory": 1024 * MB}}
    limits = ActionBounds.from_api(info, fallback_memory_mb=8192)
    assert (limits.memory_max_mb, limits.node_memory_mb, limits.total_memory_mb, limits.action_cap_mb) == (4096, 512, 1024, 512)
    assert limits.clamp_memory(3000) == 512
    with pytest.raises(PlanError) as info_error:
        planner(limits).plan(inputs(12_100, actions=2))
    needed = planner(LIMITS).plan(inputs(12_100, actions=2)).train_estimate_bytes
    assert "OWX_PLATFORM__USER_MEMORY_MB, one node's container memory (now 512), to" in str(info_error.value)
    assert "OWX_LIMITS__MEMORY_MB__MAX" not in str(info_error.value)  # 4096 is enough
    assert needed > 512 * MB
    # an upstream OpenWhisk does not report its memory: the configured one stands
    del info["limits"]["node_memory"], info["limits"]["pool_memory"]
    assert ActionBounds.from_api(info, fallback_memory_mb=8192).action_cap_mb == 4096
