"""What happens when a function's container dies: Canary's recovery and the baselines.

Each strategy runs one admitted function to its committed outcome and returns it:

* ``canary`` — checkpoints on; a dead container (crash, OOM kill, kill, lost node) is
  detected by the platform's death watch, the function is sent to the best replica
  with its function ID (the action restores its latest checkpoint itself through the
  checkpoint API) and a new replica replaces the one used;
* ``retry`` — no checkpoints, no replicas: run again from scratch (what OpenWhisk users do);
* ``active-standby`` — a warm standby per function takes over, from scratch;
* ``request-replication`` — ``copies`` executions at once on different nodes, the first
  answer wins and the others are discarded; from scratch if all of them die.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from typing import TYPE_CHECKING

from owx.canary.function import Failure, Function
from owx.platform.types import RunOutcome, RunRequest

if TYPE_CHECKING:
    from owx.canary.core import CanaryCore


def run_canary(core: CanaryCore, function: Function, request: RunRequest) -> RunOutcome:
    return _with_recovery(core, function, request, checkpoints=True, use_replicas=True)


def run_retry(core: CanaryCore, function: Function, request: RunRequest) -> RunOutcome:
    return _with_recovery(core, function, request, checkpoints=False, use_replicas=False)


def run_active_standby(core: CanaryCore, function: Function, request: RunRequest) -> RunOutcome:
    return _with_recovery(core, function, request, checkpoints=False, use_replicas=True)


def _with_recovery(core: CanaryCore, function: Function, request: RunRequest, *, checkpoints: bool,
                   use_replicas: bool) -> RunOutcome:
    node, claim = function.node, None
    while True:
        outcome = core.attempt(function, request, node, claim, checkpoints)
        failure = core.failure_of(outcome)
        core.failure_rate.record(failure is not None)
        if failure is None or len(function.attempts) >= function.options.max_attempts:
            core.commit(function, len(function.attempts), outcome)
            return outcome
        node, claim = _recover(core, function, failure, checkpoints, use_replicas)


def _recover(core: CanaryCore, function: Function, failure: Failure, checkpoints: bool,
             use_replicas: bool) -> tuple[str, str | None]:
    """Choose where the failed function continues; record what was done."""
    seq = core.checkpoints.latest(function) if checkpoints else None
    if seq is not None:
        function.restored.append(seq)
    replica = None
    if use_replicas:
        avoid = {n.name for n in core.platform.nodes() if not n.alive}
        replica = core.runtimes.take(function.spec, function.function_id, avoid)
    if replica is not None:
        node, claim = replica.node, replica.container_id
        core.memory.move(function.holders[0], node)
        core.runtimes.replenish(function.spec, function.job_id)
    else:
        node, claim = core.recovery_node(function, failure), None
    resumed = time.time()
    function.failures.append({
        "attempt": len(function.attempts), "reason": failure.reason, "node": failure.node,
        "container": failure.container, "detectedAt": int(failure.detected_at * 1000),
        "checkpointSeq": seq, "replica": claim, "resumedOn": node,
        "recoveryMs": max(0, int((resumed - failure.detected_at) * 1000)),
    })
    core.count("recoveries", function.namespace)
    return node, claim


def run_request_replication(core: CanaryCore, function: Function, request: RunRequest) -> RunOutcome:
    """``copies`` concurrent executions; the first success is committed, later ones are discarded."""
    nodes = [core.memory.node_of(h) or function.node for h in function.holders]
    lock = threading.Lock()
    winner: list[RunOutcome] = []

    def one_copy(node: str, held: str) -> RunOutcome:
        outcome = core.attempt(function, request, node, None, checkpoints=False, reservation=held)
        with lock:
            if outcome.status == "success" and core.commit(function, len(function.attempts), outcome):
                winner.append(outcome)
            elif outcome.status == "success":
                function.discarded += 1
        return outcome

    pool = ThreadPoolExecutor(len(nodes), thread_name_prefix="owx-canary-copy")
    futures: list[Future[RunOutcome]] = [pool.submit(one_copy, node, held) for node, held in zip(nodes, function.holders)]
    pending = set(futures)
    try:
        while pending and not winner:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
        if winner:
            return winner[0]
        outcomes = [f.result() for f in futures]
        failures = [core.failure_of(o) for o in outcomes]
        for failure in failures:
            core.failure_rate.record(failure is not None)
        if any(f is None for f in failures) or len(function.attempts) >= function.options.max_attempts:
            final = next(o for o, f in zip(outcomes, failures) if f is None) if any(
                f is None for f in failures) else outcomes[-1]
            core.commit(function, len(function.attempts), final)
            return final
        # every copy died: from scratch, one execution at a time
        function.node = core.recovery_node(function, failures[-1])  # type: ignore[arg-type]
        _note_restart(function, failures[-1])  # type: ignore[arg-type]
        return run_retry(core, function, request)
    finally:
        function.background.extend(f for f in futures if not f.done())  # losers: memory is freed when they end
        pool.shutdown(wait=False)


def _note_restart(function: Function, failure: Failure) -> None:
    function.failures.append({
        "attempt": len(function.attempts), "reason": failure.reason, "node": failure.node,
        "container": failure.container, "detectedAt": int(failure.detected_at * 1000), "checkpointSeq": None,
        "replica": None, "resumedOn": function.node,
        "recoveryMs": max(0, int((time.time() - failure.detected_at) * 1000)),
    })


Strategy = Callable[["CanaryCore", Function, RunRequest], RunOutcome]
STRATEGIES: dict[str, Strategy] = {
    "canary": run_canary,
    "retry": run_retry,
    "active-standby": run_active_standby,
    "request-replication": run_request_replication,
}
