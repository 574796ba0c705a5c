"""Canary in the Python SDK: the ``@stateful`` decorator and a client of the canary routes.

::

    @stateful(checkpoint="explicit", replication="dynamic", memory=256)
    def solve(n):
        from owx.canary.checkpoint import Checkpointer
        with Checkpointer.from_env() as ckpt:
            state = ckpt.restore() or {"i": 0, "total": 0}  # where a dead container left off
            while state["i"] < n:
                state["total"] += state["i"]
                state["i"] += 1
                ckpt.save("step", **state)
            return state["total"]

    solve.invoke(100)                  # one fault-tolerant activation
    solve.job([{"n": 10}, {"n": 20}])  # a job: admitted together, values in order
    CanaryClient(solve.client).rows("function_info")
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable
from urllib.parse import quote

from owx.canary.options import ANNOTATION, CanaryOptions
from owx.gateway.sdk.client import ActionFailed, Client
from owx.gateway.sdk.decorators import RemoteFunction, _params


@dataclass(frozen=True)
class JobSubmission:
    job_id: str
    activation_ids: list[str]


class CanaryClient:
    """Reads Canary's tables and submits jobs through a :class:`Client`."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def overview(self) -> dict[str, Any]:
        """Row counts of the five tables and the core's counters."""
        return self.client.get("canary")

    def rows(self, table: str, limit: int = 30, skip: int = 0) -> list[dict[str, Any]]:
        """Rows of ``table`` (``worker_info``, ``job_info``, ``function_info``, ``checkpoint_info``,
        ``replication_info``), newest first."""
        return self.client.get(f"canary/{quote(table)}", limit=limit, skip=skip)

    def row(self, table: str, row_id: str) -> dict[str, Any]:
        return self.client.get(f"canary/{quote(table)}/{quote(row_id)}")

    def submit_job(self, action_name: str, params: list[dict[str, Any]]) -> JobSubmission:
        """Submit one activation per parameter set, admitted together (gang)."""
        body = self.client.post("canary/jobs", {"action": action_name, "params": params})
        return JobSubmission(body["jobId"], body["activationIds"])

    def wait_job(self, job: JobSubmission, timeout: float = 3600.0) -> list[dict[str, Any]]:
        """The activation records of ``job``, in submission order."""
        deadline = time.monotonic() + timeout
        return [self.client.wait(aid, max(0.0, deadline - time.monotonic())) for aid in job.activation_ids]


class StatefulFunction(RemoteFunction):
    """A deployed stateful function; ``job(items)`` runs a gang-admitted fan-out."""

    def job(self, items: Iterable[Any]) -> list[Any]:
        self._ensure()
        params = [_params((), item) if isinstance(item, dict) else _params((item,), {}) for item in items]
        canary = CanaryClient(self.client)
        records = canary.wait_job(canary.submit_job(self.name, params))
        values = []
        for record in records:
            if not record.get("response", {}).get("success"):
                raise ActionFailed(record)
            values.append(record["response"]["result"]["value"])
        return values


def stateful(function: Callable[..., Any] | None = None, *, checkpoint: str = "implicit", interval_s: float = 1.0,
             replication: str = "dynamic", fault_tolerance: str = "canary", client: Client | None = None,
             name: str | None = None, kind: str = "python:3", memory: int | None = None, timeout: int | None = None,
             annotations: dict[str, Any] | None = None):
    """Decorator: ``@action`` for a fault-tolerant stateful function, plus the Canary options
    (validated here: a bad value raises pydantic's ValidationError before anything is deployed)."""
    options = CanaryOptions(checkpoint=checkpoint, interval_s=interval_s, replication=replication,  # type: ignore[arg-type]
                            fault_tolerance=fault_tolerance)  # type: ignore[arg-type]
    marked = {**(annotations or {}), ANNOTATION: options.model_dump()}
    limits = {k: v for k, v in (("memory", memory), ("timeout", timeout)) if v is not None}

    def wrap(fn: Callable[..., Any]) -> StatefulFunction:
        return StatefulFunction(fn, client, name, kind, limits, marked)

    return wrap(function) if function is not None else wrap
