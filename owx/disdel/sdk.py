"""DiSDeL from Python: ``submit(job) -> JobHandle``, ``status(job_id)``, ``estimate(job)``.

::

    from owx import disdel
    handle = disdel.submit("owx/disdel/examples/small_cnn.yaml")
    print(handle.status().status)       # planning / running / succeeded / failed
    state = handle.wait()
    print(state.result.model_path, state.result.eval_loss)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from owx.disdel import data
from owx.disdel.calibration import gateway_probe, load_or_measure, local_probe, local_runtime_key
from owx.disdel.executor import JobRunner, build_planner
from owx.disdel.gateway import Gateway
from owx.disdel.estimator import RuntimeCalibration
from owx.disdel.history import HistoryStore, open_history
from owx.disdel.job import JobRequest, load_job, parse_job
from owx.disdel.limits import PlatformLimits
from owx.disdel.model_profile import profile_model
from owx.disdel.planner import Plan, PlanInputs
from owx.disdel.settings import DisdelSettings
from owx.disdel.state import JobState, load_state
from owx.settings import Settings


def _job(job: JobRequest | dict[str, Any] | str | Path) -> JobRequest:
    return load_job(job) if isinstance(job, (str, Path)) else parse_job(job)


class JobHandle:
    """A job running in a background thread of this process."""

    def __init__(self, runner: JobRunner) -> None:
        self.runner = runner
        self.job_id = runner.job_id
        self._final: JobState | None = None
        self._thread = threading.Thread(target=self._run, name=f"disdel-{self.job_id}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self._final = self.runner.run()

    def status(self) -> JobState:
        """The job's state now (a copy)."""
        return self._final or self.runner.snapshot()

    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> JobState:
        """Block until the job ends (or ``timeout`` s pass) and return its state."""
        self._thread.join(timeout)
        return self.status()


def submit(job: JobRequest | dict[str, Any] | str | Path, *, gateway: Gateway | None = None,
           settings: DisdelSettings | None = None, history: HistoryStore | None = None,
           on_change: Callable[[JobState], None] | None = None) -> JobHandle:
    """Validate ``job`` (a request, a dict or a YAML path) and start it; returns at once."""
    request = _job(job)
    settings = settings or Settings().disdel
    gateway = gateway or Gateway.connect(namespace=settings.namespace)
    limits = gateway.limits(settings.pool_memory())
    calibration = calibrate(gateway, settings, limits)
    history = history or open_history(settings.root())
    return JobHandle(JobRunner(request, gateway, settings, history, calibration, limits, on_change))


def calibrate(gateway: Gateway, settings: DisdelSettings, limits: PlatformLimits) -> RuntimeCalibration:
    """The calibration of the gateway's runtime for DiSDeL's action kind (measured there once)."""
    runtime = f"{settings.train_kind}@{gateway.client.apihost}"
    probe = gateway_probe(gateway, settings.train_kind, limits.memory_max_mb)
    return load_or_measure(settings.root(), runtime, probe)


def status(job_id: str, settings: DisdelSettings | None = None) -> JobState:
    """The saved state of a job started by any process on this machine."""
    return load_state((settings or Settings().disdel).root(), job_id)


def estimate(job: JobRequest | dict[str, Any] | str | Path, *, limits: PlatformLimits | None = None,
             settings: DisdelSettings | None = None, history: HistoryStore | None = None) -> Plan:
    """The plan a job would run with (memory, actions, timeouts, aggregation tree), without running it.

    Without a gateway the runtime is calibrated locally (child processes in cgroups)."""
    from owx.disdel.models import build_model

    request = _job(job)
    settings = settings or Settings().disdel
    limits = limits or PlatformLimits.from_settings()
    info = data.describe(request.dataset)
    profile = profile_model(build_model(request.model, info.shape, info.classes, request.seed))
    calibration = load_or_measure(settings.root(), local_runtime_key(), local_probe(settings.cgroup_prefix))
    record = (history or open_history(settings.root())).get(request.signature())
    planner = build_planner(settings, calibration, limits)
    return planner.plan(PlanInputs(request, info, profile, request.held_out(info.samples), record))
