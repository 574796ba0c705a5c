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
from owx.disdel.calibration import (CalibrationError, gateway_probe, load_or_measure, local_probe, local_runtime_key,
                                    measure_step)
from owx.disdel.executor import JobRunner, build_planner
from owx.disdel.gateway import Gateway
from owx.disdel.estimator import RuntimeCalibration
from owx.disdel.history import HistoryStore, open_history
from owx.disdel.job import JobError, JobRequest, load_job, parse_job
from owx.disdel.action_bounds import ActionBounds
from owx.disdel.model_profile import profile_model
from owx.disdel.planner import Plan, PlanInputs
from owx.disdel.settings import DisdelSettings
from owx.disdel.state import JobState, load_state
from owx.settings import Settings


PROBE_MEMORY_MB = 1024


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


def submit(job: JobRequest | dict[str, Any] | str | Path | None = None, *, model: Any = None, data: Any = None,
           gateway: Gateway | None = None, settings: DisdelSettings | None = None, history: HistoryStore | None = None,
           on_change: Callable[[JobState], None] | None = None, **fields: Any) -> JobHandle:
    """Validate ``job`` (a request, a dict or a YAML path) and start it; returns at once.

    Or bring the parts: ``model`` a ``keras.Model`` (or a model spec), ``data`` an ``(x, y)``
    pair of arrays (or a dataset spec), and the other job fields as keywords::

        disdel.submit(model=my_model, data=(x, y), batch_size=32, epochs=3)
    """
    settings = settings or Settings().disdel
    request = _job(job) if job is not None else _assemble(model, data, settings.root() / "uploads", fields)
    gateway = gateway or Gateway.connect(namespace=settings.namespace)
    limits = gateway.limits(settings.pool_memory())
    calibration = calibrate(gateway, settings, limits)
    history = history or open_history(settings.root())
    return JobHandle(JobRunner(request, gateway, settings, history, calibration, limits, on_change))


def _assemble(model: Any, dataset: Any, uploads: Path, fields: dict[str, Any]) -> JobRequest:
    """A job from an in-memory model and arrays: both written under ``uploads`` for the actions."""
    import secrets

    uploads.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(6)
    if hasattr(model, "save") and hasattr(model, "layers"):
        path = uploads / f"{token}.keras"
        model.save(path)
        model = {"kind": "keras", "path": str(path)}
    if isinstance(dataset, tuple) and len(dataset) == 2:
        dataset = {"kind": "npz", "path": str(data.write_npz(uploads / f"{token}.npz", *dataset))}
    if model is None or dataset is None:
        raise JobError("give a job, or a model and data")
    return parse_job({**fields, "model": model, "dataset": dataset})


def calibrate(gateway: Gateway, settings: DisdelSettings, limits: ActionBounds) -> RuntimeCalibration:
    """The calibration of the gateway's runtime for DiSDeL's action kind (measured there once); two
    probes run at a time, each within ``PROBE_MEMORY_MB`` (the largest peaks at about 600 MB)."""
    runtime = f"{settings.train_kind}@{gateway.client.apihost}"
    probe = gateway_probe(gateway, settings.train_kind, min(limits.action_cap_mb, PROBE_MEMORY_MB),
                          limits.clamp_timeout(300_000))
    try:
        return load_or_measure(settings.root(), runtime, probe)
    except CalibrationError as exc:
        raise CalibrationError(f"{exc}; calibration runs probes of up to ~600 MB: if an action cannot have that "
                               f"here, {limits.raise_hint(PROBE_MEMORY_MB)}") from None


def status(job_id: str, settings: DisdelSettings | None = None) -> JobState:
    """The saved state of a job started by any process on this machine."""
    return load_state((settings or Settings().disdel).root(), job_id)


def estimate(job: JobRequest | dict[str, Any] | str | Path, *, limits: ActionBounds | None = None,
             settings: DisdelSettings | None = None, history: HistoryStore | None = None) -> Plan:
    """The plan a job would run with (memory, actions, timeouts, aggregation tree), without running it.

    Without a gateway the runtime is calibrated locally (child processes in cgroups)."""
    import tempfile

    from owx.disdel.models import check_input, load_model, stage

    request = _job(job)
    settings = settings or Settings().disdel
    limits = limits or ActionBounds.from_settings()
    info = data.describe(request.dataset)
    probe = local_probe(settings.cgroup_prefix)
    calibration = load_or_measure(settings.root(), local_runtime_key(), probe)
    step = None
    with tempfile.TemporaryDirectory(prefix="owx-disdel-estimate-") as directory:
        Path(directory).chmod(0o755)
        ref = stage(request.model, info.shape, info.classes, Path(directory), request.learning_rate, request.seed)
        model = load_model(ref)
        check_input(model, info.shape, request.model_label)
        profile = profile_model(model)
        if settings.measure_step:
            x, y = data.load(request.dataset)
            step = measure_step(probe, ref.model_dump(mode="json"), x, y, request.batch_size, Path(directory))
    record = (history or open_history(settings.root())).get(request.signature())
    planner = build_planner(settings, calibration, limits)
    return planner.plan(PlanInputs(request, info, profile, request.held_out(info.samples), record, step))
