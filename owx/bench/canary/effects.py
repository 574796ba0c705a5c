"""Exactly-once checked from outside owx: an effect log in Redis, and its checker.

Every execution (attempt) of a benchmark action appends JSON lines to a Redis list in a
redis-server the bench starts — a log owx neither writes nor reads:

* ``{"kind": "effect", "aid", "attempt", "step"}`` once per step it completes (a training
  epoch): the step's externally visible effect (e.g. its metrics published to a dashboard);
* ``{"kind": "result", "aid", "attempt", "step"}`` once, just before it returns its result.

``attempt`` is a random token per execution; the action returns it in its result, so the
stored activation record names the execution whose result owx committed.

The action code (:data:`ACTION_SIDE`) follows the recipe Canary's exactly-once rests on:
a step's effect is appended, then its checkpoint saved; after a restore, the one step that
may already have its effect (the execution died between the two) is looked up in the log
under the activation id, which a Canary recovery keeps. Nothing else is deduplicated:
an execution restarted from scratch, or two executions at once, append twice.

:func:`check` compares the log with the committed records. Per activation:

* ``results_lost``: no successful record, or no result line from the attempt it names;
* ``results_doubled``: more than one result line (two executions ran to their end);
* ``effects_lost``: steps of 0..steps-1 without an effect line;
* ``effects_doubled``: effect lines beyond the first for a step.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ACTION_SIDE = '''
import json, os, time, uuid

ATTEMPT = "%d-%s" % (os.getpid(), uuid.uuid4().hex[:12])

def _effect_log(args):
    import redis
    return redis.Redis.from_url(args["effects_url"]), args["effects_key"]

def _append(log, kind, step):
    client, key = log
    client.rpush(key, json.dumps({"kind": kind, "aid": os.environ.get("__OW_ACTIVATION_ID", "local"),
                                  "attempt": ATTEMPT, "step": step, "t": time.time()}))

def _published(log, step):
    """Whether an earlier execution of this activation already appended step's effect."""
    client, key = log
    aid = os.environ.get("__OW_ACTIVATION_ID", "local")
    for raw in client.lrange(key, 0, -1):
        line = json.loads(raw)
        if line["kind"] == "effect" and line["aid"] == aid and line["step"] == step:
            return True
    return False
'''


@dataclass(frozen=True)
class EffectLine:
    kind: str  # "effect" or "result"
    aid: str
    attempt: str
    step: int
    t: float


@dataclass(frozen=True)
class EffectCheck:
    """What the effect log says about exactly-once, over ``activations``."""

    activations: int
    results_lost: int
    results_doubled: int
    effects_lost: int
    effects_doubled: int
    attempts: int  # executions seen in the log (one per activation when nothing failed)

    @property
    def lost(self) -> int:
        return self.results_lost + self.effects_lost

    @property
    def doubled(self) -> int:
        return self.results_doubled + self.effects_doubled


def read_log(client: Any, key: str) -> list[EffectLine]:
    """Every line of the effect log at ``key`` (a redis client), oldest first."""
    return [EffectLine(**{k: v for k, v in json.loads(raw).items() if k in EffectLine.__dataclass_fields__})
            for raw in client.lrange(key, 0, -1)]


def check(lines: Iterable[EffectLine], committed: Mapping[str, str | None], steps: int) -> EffectCheck:
    """Compare the log with ``committed``: activation id -> the attempt token of its
    successful record (None: no successful record). Lines of other activations are ignored."""
    effects: dict[str, Counter[int]] = defaultdict(Counter)
    results: dict[str, list[str]] = defaultdict(list)
    attempts: set[tuple[str, str]] = set()
    for line in lines:
        if line.aid not in committed:
            continue
        attempts.add((line.aid, line.attempt))
        if line.kind == "effect":
            effects[line.aid][line.step] += 1
        elif line.kind == "result":
            results[line.aid].append(line.attempt)
    results_lost = results_doubled = effects_lost = effects_doubled = 0
    for aid, attempt in committed.items():
        results_lost += attempt is None or attempt not in results[aid]
        results_doubled += max(0, len(results[aid]) - 1)
        counts = effects[aid]
        effects_lost += sum(1 for step in range(steps) if counts[step] == 0)
        effects_doubled += sum(n - 1 for n in counts.values() if n > 1)
    return EffectCheck(len(committed), results_lost, results_doubled, effects_lost, effects_doubled, len(attempts))
