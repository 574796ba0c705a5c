"""The bench's exactly-once check: the effect log in a real redis-server, written by the
action-side code the training action runs, judged by ``owx.bench.canary.effects.check``."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
import redis

from owx.bench.canary.effects import ACTION_SIDE, check, read_log

STEPS = 4


class Execution:
    """One execution of an activation: the action-side snippet in a fresh namespace."""

    def __init__(self, activation_id: str, url: str, key: str) -> None:
        os.environ["__OW_ACTIVATION_ID"] = activation_id
        self.ns: dict[str, Any] = {}
        exec(compile(ACTION_SIDE, "<action-side>", "exec"), self.ns)
        self.log = self.ns["_effect_log"]({"effects_url": url, "effects_key": key})
        self.attempt = self.ns["ATTEMPT"]

    def steps(self, start: int, stop: int, restored: bool = False) -> None:
        """Steps ``start``..``stop``-1 as the training action does them (look-up after a restore)."""
        for step in range(start, stop):
            if not (restored and step == start and self.ns["_published"](self.log, step)):
                self.ns["_append"](self.log, "effect", step)

    def finish(self) -> str:
        self.ns["_append"](self.log, "result", STEPS)
        return self.attempt


@pytest.fixture
def effect_log(redis_server) -> tuple[str, str]:
    return redis_server.url, f"effects-{uuid.uuid4().hex[:8]}"


def _lines(effect_log: tuple[str, str]):
    url, key = effect_log
    return read_log(redis.Redis.from_url(url), key)


def test_a_recovery_from_a_checkpoint_leaves_each_effect_once(effect_log):
    """Killed after step 2's effect, before its checkpoint: the recovery restores at step 2,
    finds that effect in the log and does not append it again."""
    first = Execution("act-recovered", *effect_log)
    first.steps(0, 3)  # the checkpoint says 2 steps done: step 2's effect is in the window
    second = Execution("act-recovered", *effect_log)
    second.steps(2, STEPS, restored=True)
    committed = {"act-recovered": second.finish()}
    result = check(_lines(effect_log), committed, STEPS)
    assert (result.lost, result.doubled, result.attempts) == (0, 0, 2)


def test_a_retry_from_scratch_doubles_the_effects_it_redoes(effect_log):
    first = Execution("act-retried", *effect_log)
    first.steps(0, 3)
    second = Execution("act-retried", *effect_log)
    second.steps(0, STEPS)
    committed = {"act-retried": second.finish()}
    result = check(_lines(effect_log), committed, STEPS)
    assert result.effects_doubled == 3 and result.lost == 0


def test_two_executions_to_the_end_double_the_result(effect_log):
    one, two = Execution("act-twice", *effect_log), Execution("act-twice", *effect_log)
    one.steps(0, STEPS)
    two.steps(0, STEPS)
    winner, _ = one.finish(), two.finish()
    result = check(_lines(effect_log), {"act-twice": winner}, STEPS)
    assert result.results_doubled == 1 and result.effects_doubled == STEPS


def test_a_lost_activation_and_a_lost_effect_are_counted(effect_log):
    dead = Execution("act-dead", *effect_log)
    dead.steps(0, 2)  # killed, never run again: no successful record
    skipped = Execution("act-skipped", *effect_log)
    skipped.steps(0, 1)
    skipped.steps(2, STEPS)  # step 1's effect never happened
    committed = {"act-dead": None, "act-skipped": skipped.finish()}
    result = check(_lines(effect_log), committed, STEPS)
    assert result.results_lost == 1
    assert result.effects_lost == (STEPS - 2) + 1


def test_a_record_naming_an_execution_without_a_result_line_is_a_lost_result(effect_log):
    execution = Execution("act-phantom", *effect_log)
    execution.steps(0, STEPS)
    execution.finish()
    result = check(_lines(effect_log), {"act-phantom": "1-not-an-execution"}, STEPS)
    assert result.results_lost == 1 and result.effects_lost == 0
