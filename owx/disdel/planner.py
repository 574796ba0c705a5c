"""Planner: how many training actions, their memory and time limits, and the aggregation tree.

c_d starts at 2 (or the job's ``actions``); while the estimate m_e for one action's
shard exceeds the action maximum M, c_d grows by ⌈(m_e − M)/M⌉ and m_e is estimated
again.  Shards are equal.  Training actions are grouped into clusters of at most
``cluster_size`` (and at most what one aggregator can hold); each cluster gets a
level-1 aggregator, and higher levels are added while more than one aggregator's
output remains.  The final (evaluating) aggregation runs on a training container when
it fits one (the training limit then includes what that aggregation adds to a warm
training container); the aggregation action then only averages with NumPy, sized so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import BaseModel

from owx.disdel.data import DatasetInfo, shard_bounds
from owx.disdel.estimator import MB, MeasuredStep, MemoryEstimate, MemoryEstimator
from owx.disdel.history import HistoryRecord
from owx.disdel.job import JobRequest
from owx.disdel.action_bounds import ActionBounds
from owx.disdel.model_profile import ModelProfile
from owx.disdel.timeouts import TimeoutManager


class PlanError(ValueError):
    """No allocation fits the platform's limits; the message says which limit to raise."""


class Plan(BaseModel):
    """The allocation one job runs with (stored in the job state)."""

    actions: int
    shard_samples: list[int]
    eval_samples: int
    train_estimate_bytes: int
    train_estimate: dict[str, int]
    train_memory_mb: int
    train_timeout_ms: int
    timeout_source: str
    concurrent: int
    aggregate_memory_mb: int
    aggregate_estimate_bytes: int
    final_on_trainer: bool  # the evaluating final aggregation fits a (warm) training container
    final_estimate_bytes: int
    aggregate_timeout_ms: int
    fan_in_max: int
    tree: list[list[list[int]]]  # tree[level][group] = indices into the level below (level 0 = training)
    rounds: list[int]  # epochs per round

    @property
    def levels(self) -> int:
        return len(self.tree)

    @property
    def averages_in_trainers(self) -> bool:
        """Between rounds, the next round's training actions average the last round's models
        themselves: one aggregator holds them all, and that fits a training action."""
        return self.final_on_trainer and self.levels == 1


@dataclass(frozen=True)
class PlanInputs:
    job: JobRequest
    data: DatasetInfo
    profile: ModelProfile
    eval_samples: int
    history: HistoryRecord | None = None
    step: MeasuredStep | None = None


def _tree(actions: int, cluster_size: int, fan_in: int) -> list[list[list[int]]]:
    def groups(count: int, size: int) -> list[list[int]]:
        return [list(range(start, min(start + size, count))) for start in range(0, count, size)]

    tree = [groups(actions, min(cluster_size, fan_in))]
    while len(tree[-1]) > 1:
        tree.append(groups(len(tree[-1]), fan_in))
    return tree


def _rounds(epochs: int, sync_every: int) -> list[int]:
    if sync_every <= 0 or sync_every >= epochs:
        return [epochs]
    full, rest = divmod(epochs, sync_every)
    return [sync_every] * full + ([rest] if rest else [])


class Planner:
    def __init__(self, estimator: MemoryEstimator, limits: ActionBounds, timeouts: TimeoutManager,
                 cluster_size: int = 4, sync_every: int = 1) -> None:
        self.estimator = estimator
        self.limits = limits
        self.timeouts = timeouts
        self.cluster_size = cluster_size
        self.sync_every = sync_every

    def _estimate(self, inputs: PlanInputs, actions: int) -> MemoryEstimate:
        train_samples = inputs.data.samples - inputs.eval_samples
        largest = math.ceil(train_samples / actions)
        warm = len(_rounds(inputs.job.epochs, self.sync_every)) > 1
        return self.estimator.training(inputs.profile, inputs.job.batch_size, largest, inputs.data.sample_bytes, warm,
                                       inputs.step)

    def choose_actions(self, inputs: PlanInputs) -> tuple[int, MemoryEstimate]:
        """c_d and the estimate for its shards (the paper's growth rule), within the largest action
        the platform can run: its action maximum, and one node's container pool."""
        cap_mb = self.limits.action_cap_mb
        memory_max = cap_mb * MB
        label = f"{inputs.job.model_label} at batch {inputs.job.batch_size}"
        train_samples = inputs.data.samples - inputs.eval_samples
        fixed = self.estimator.training(inputs.profile, inputs.job.batch_size, 0, inputs.data.sample_bytes,
                                        step=inputs.step)
        if fixed.total > memory_max:
            raise PlanError(f"{label} needs {fixed.mb} MB per action before any data, more than the "
                            f"{cap_mb} MB an action can have here: {self.limits.raise_hint(fixed.mb)}, "
                            "or lower the batch size")
        actions = inputs.job.actions or 2
        estimate = self._estimate(inputs, actions)
        while estimate.total > memory_max and inputs.job.actions is None:
            actions += math.ceil((estimate.total - memory_max) / memory_max)
            if actions > train_samples:
                one = self.estimator.training(inputs.profile, inputs.job.batch_size, 1, inputs.data.sample_bytes,
                                              step=inputs.step)
                raise PlanError(f"{label}: the data cannot be split finely enough to fit {cap_mb} MB per action: "
                                f"{self.limits.raise_hint(one.mb)}")
            estimate = self._estimate(inputs, actions)
        if estimate.total > memory_max:
            raise PlanError(f"{label}: {actions} actions need {estimate.mb} MB each, more than the {cap_mb} MB an "
                            f"action can have here: use more actions or {self.limits.raise_hint(estimate.mb)}")
        return actions, estimate

    def plan(self, inputs: PlanInputs) -> Plan:
        job, history = inputs.job, inputs.history
        actions, estimate = self.choose_actions(inputs)
        sample_bytes = inputs.data.sample_bytes
        memory_max = self.limits.action_cap_mb * MB
        fan_in = self.estimator.fan_in_limit(inputs.profile, memory_max, inputs.eval_samples, sample_bytes)
        if fan_in < 2:
            two = self.estimator.aggregation(inputs.profile, 2, inputs.eval_samples, sample_bytes, warm=True)
            raise PlanError(f"one aggregator cannot hold two {job.model_label} models within "
                            f"{self.limits.action_cap_mb} MB: {self.limits.raise_hint(two.mb)}")
        tree = _tree(actions, self.cluster_size, fan_in)
        widest = max(len(group) for level in tree for group in level)
        top = len(tree[-1][0])
        final = self.estimator.aggregation(inputs.profile, top, inputs.eval_samples, sample_bytes, eval_batch=job.batch_size)
        extra = self.estimator.aggregation_increment(inputs.profile, top, inputs.eval_samples, sample_bytes, job.batch_size)
        final_on_trainer = estimate.total + extra.total <= memory_max
        train_bytes = estimate.total + (extra.total if final_on_trainer else 0)
        floor = (history.memory_floor_mb or 0) if history else 0
        train_samples = inputs.data.samples - inputs.eval_samples
        if history and history.peak_bytes_per_action and history.samples_per_action == math.ceil(train_samples / actions):
            train_bytes = max(train_bytes, history.peak_bytes_per_action)  # a peak measured on this very shard size
        train_mb = self.limits.clamp_memory(max(-(-train_bytes // MB), floor))
        rounds = _rounds(job.epochs, self.sync_every)
        aggregate = self.estimator.aggregation(inputs.profile, widest, inputs.eval_samples, sample_bytes,
                                               evaluates=not final_on_trainer, warm=len(rounds) > 1,
                                               eval_batch=job.batch_size)
        aggregate_mb = self.limits.clamp_memory(max(aggregate.mb, (history.aggregate_memory_floor_mb or 0) if history else 0))
        shards = [end - start for start, end in shard_bounds(train_samples, actions)]
        train_timeout = self.timeouts.training(history, max(shards), max(rounds), actions, train_mb, job.expected_cost)
        return Plan(
            actions=actions,
            shard_samples=shards,
            eval_samples=inputs.eval_samples,
            train_estimate_bytes=train_bytes,
            train_estimate=estimate.breakdown(),
            train_memory_mb=train_mb,
            train_timeout_ms=train_timeout.ms,
            timeout_source=train_timeout.source,
            concurrent=max(1, min(actions, self.limits.total_memory_mb // train_mb)),
            aggregate_memory_mb=aggregate_mb,
            aggregate_estimate_bytes=aggregate.total,
            final_on_trainer=final_on_trainer,
            final_estimate_bytes=final.total,
            aggregate_timeout_ms=self.timeouts.aggregation(history).ms,
            fan_in_max=fan_in,
            tree=tree,
            rounds=rounds,
        )
