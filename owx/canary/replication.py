"""Algorithm 5 of Canary: how many replicas a runtime needs, and where they go.

A *runtime* is an action's code and kind (its ``ActionSpec.key``): a replica of it is a
warm, initialised container that can take over any of its functions. For every runtime
with scheduled functions the policy computes the required replicas ``rep_req`` from the
strategy; the current replication factor is ``rep_act / func_tot`` and the new one
``rep_req / func_tot`` (replicas per function, over every function the replicas must cover;
the extracted text of the paper writes the ratios the other way round, which reverses the
comparison — we keep the reading in which a replica is launched when there are fewer than
needed). Replicas are launched while the current factor is below the new one. Dividing the
current replicas by the *active* functions only, as a literal reading would, launches nothing
when a job's second function arrives with one replica for the first (1/1 = 2/2), so a second
failure waits for a cold runtime.

Strategies:

* ``lenient`` — one replica per runtime while it has active functions;
* ``aggressive`` — one replica for every two active functions (at least two);
* ``dynamic`` (default) — follows the observed failure rate ``f`` of recent functions:
  the failures expected among ``func_tot`` functions, doubled for margin and rounded up,
  between one replica and the aggressive count;
* ``standby`` — one per function: the active-standby baseline, not a Canary strategy.

Placement: the first replica of a runtime goes to a node that hosts the job's
functions, further ones to the other live nodes (round robin), so that losing one node
never takes every replica with it.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass
from typing import Literal

from owx.canary.options import Replication

DYNAMIC_MARGIN = 2.0


class FailureRate:
    """Share of recent function executions that ended with a dead container."""

    def __init__(self, window: int) -> None:
        self._outcomes: deque[bool] = deque(maxlen=window)
        self._lock = threading.Lock()

    def record(self, failed: bool) -> None:
        with self._lock:
            self._outcomes.append(failed)

    @property
    def value(self) -> float:
        with self._lock:
            return sum(self._outcomes) / len(self._outcomes) if self._outcomes else 0.0


def aggressive_count(functions: int) -> int:
    return max(2, math.ceil(functions / 2))


def required_replicas(strategy: Replication | Literal["standby"], functions: int, failure_rate: float) -> int:
    """``rep_req`` for a runtime with ``functions`` active plus scheduled functions."""
    if functions <= 0:
        return 0
    if strategy == "standby":
        return functions
    if strategy == "lenient":
        return 1
    if strategy == "aggressive":
        return aggressive_count(functions)
    expected = math.ceil(functions * failure_rate * DYNAMIC_MARGIN)
    return min(aggressive_count(functions), max(1, expected))


@dataclass(frozen=True)
class ReplicationDecision:
    """What Algorithm 5 decided for one runtime."""

    required: int
    current_factor: float
    new_factor: float
    launch: int  # replicas to start now


def decide(strategy: Replication | Literal["standby"], active: int, scheduled: int, replicas: int, failure_rate: float) -> ReplicationDecision:
    """Algorithm 5 for one runtime: ``active`` running functions, ``scheduled`` new ones,
    ``replicas`` live (or starting) replicas."""
    total = active + scheduled
    required = required_replicas(strategy, total, failure_rate)
    current = replicas / total if total else (math.inf if replicas else 0.0)
    new = required / total if total else 0.0
    launch = required - replicas if required >= 1 and current < new else 0
    return ReplicationDecision(required, current, new, max(0, launch))


def placement(count: int, job_nodes: list[str], live_nodes: list[str], existing: list[str]) -> list[str]:
    """Nodes for ``count`` new replicas given the nodes of ``existing`` ones.

    The first replica of a runtime goes to a node running the job's functions; further
    ones go to the live nodes holding the fewest replicas, other than the first one's
    node while there is another.
    """
    if not live_nodes:
        return []
    held = {node: existing.count(node) for node in live_nodes}
    chosen: list[str] = []
    for _ in range(count):
        if not existing and not chosen:
            hosts = [n for n in job_nodes if n in held] or live_nodes
            node = hosts[0]
        else:
            first = (existing or chosen)[0]
            others = [n for n in live_nodes if n != first] or live_nodes
            node = min(others, key=lambda n: (held[n], live_nodes.index(n)))
        held[node] += 1
        chosen.append(node)
    return chosen
