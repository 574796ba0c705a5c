"""What runs inside DiSDeL's actions (or a bare process): training one shard, averaging.

TensorFlow is imported on first use and configured once per process; a warm action
container keeps its compiled models between rounds and only resets weights and the
optimizer.  Each epoch ends with a progress file and a canary checkpoint, so a retried
action resumes from its last completed epoch instead of from scratch.
"""

from __future__ import annotations

import gc
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from owx.common import malloc
from owx.disdel import weights as weight_files
from owx.disdel.messages import (
    AggregateParams,
    AggregateResult,
    MemorySample,
    ModelRef,
    TrainParams,
    TrainResult,
)
from owx.disdel.shared_files import write_shared
from owx.disdel.usage import MemorySampler, own_cgroup, peak_bytes

_MODELS: dict[ModelRef, Any] = {}
_THREADS: list[int] = []
MAX_RESULT_SAMPLES = 300


def _tensorflow(threads: int) -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    if not _THREADS:
        if threads:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        _THREADS.append(threads)
    return tf


def _model(ref: ModelRef) -> Any:
    """A compiled model for ``ref``, reused within the process (weights are reset by callers)."""
    if ref not in _MODELS:
        from owx.disdel.models import load_model

        _MODELS[ref] = load_model(ref)
    return _MODELS[ref]


def _reset_optimizer(model: Any) -> None:
    """A fresh optimizer state (step count, moments) without recompiling the train step."""
    for variable in model.optimizer.variables:
        if not variable.path.endswith("learning_rate"):
            variable.assign(np.zeros(variable.shape, dtype=variable.dtype))


def release_memory() -> None:
    """Give freed memory back to the OS, so a warm container starts each run from its baseline."""
    gc.collect()
    malloc.trim()


def _load_shard(path: str) -> tuple[np.ndarray, np.ndarray]:
    with np.load(path) as archive:
        return archive["x"], archive["y"]


def _write_progress(path: str, doc: dict[str, Any]) -> None:
    write_shared(path, lambda tmp: tmp.write_text(json.dumps(doc)))


def _samples(sampler: MemorySampler) -> list[MemorySample]:
    step = max(1, len(sampler.samples) // MAX_RESULT_SAMPLES)
    return [MemorySample(t=t, bytes=b) for t, b in sampler.samples[::step]]


def _checkpointer(params: TrainParams) -> Any:
    """Canary's checkpointer for this action (None when canary or a store is not available)."""
    try:
        from owx.canary.checkpoint import ENV_STORE, Checkpointer, CheckpointError, open_checkpoint_store
    except ImportError:
        return None
    url = os.environ.get(ENV_STORE) or params.checkpoint_store
    if not url:
        return None
    try:
        store = open_checkpoint_store(url)
    except CheckpointError:
        return None
    return Checkpointer(f"disdel/{params.job_id}/{params.key}", store)


def _start_weights(params: TrainParams) -> list[np.ndarray] | None:
    """The weights training starts from: the average of ``init_average``, ``init_weights``, or None."""
    if params.init_average:
        models = [weight_files.load(item.weights) for item in params.init_average]
        averaged = weight_files.weighted_average(models, [item.samples for item in params.init_average])
        del models
        return averaged
    return weight_files.load(params.init_weights) if params.init_weights else None


def train(params: TrainParams) -> TrainResult:
    """Train on one shard for ``params.epochs`` epochs (fewer once the loss reaches ε)."""
    group = own_cgroup()
    phases = {"start": time.time()}
    with MemorySampler(group) as sampler:
        tf = _tensorflow(params.threads)
        start = _start_weights(params)  # before the shard: the inputs are not held with it
        x, y = _load_shard(params.shard)
        phases["data_loaded"] = time.time()
        model = _model(params.model)
        if start is not None:
            model.set_weights(start)
            del start
        _reset_optimizer(model)
        ckpt = _checkpointer(params)
        done, losses = 0, []
        if ckpt is not None and (state := ckpt.restore()) is not None:
            model.set_weights(state["weights"])
            done, losses = int(state["epoch"]), list(state["losses"])
        resumed = done
        phases["model_ready"] = time.time()

        class EpochEnd(tf.keras.callbacks.Callback):
            def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
                loss = float((logs or {})["loss"])
                losses.append(loss)
                number = epoch + 1
                if ckpt is not None:
                    ckpt.save(f"epoch-{number}", weights=self.model.get_weights(), epoch=number, losses=losses)
                _write_progress(params.progress, {"epoch": params.epoch_offset + number, "loss": loss, "t": time.time()})
                if params.target_loss and loss <= params.target_loss:
                    self.model.stop_training = True

        already_converged = bool(losses) and params.target_loss > 0 and losses[-1] <= params.target_loss
        if done < params.epochs and not already_converged:
            model.fit(x, y, batch_size=params.batch_size, epochs=params.epochs, initial_epoch=done,
                      verbose=0, callbacks=[EpochEnd()])
        phases["fit_done"] = time.time()
        weight_files.save(params.out_weights, model.get_weights())
        if ckpt is not None:
            ckpt.close()
        samples = len(y)
        del x, y
        release_memory()
    return TrainResult(
        key=params.key,
        weights=params.out_weights,
        samples=samples,
        epochs_run=len(losses),
        losses=losses,
        stopped_early=len(losses) < params.epochs,
        resumed_from_epoch=resumed,
        peak_memory_bytes=peak_bytes(group),
        phases=phases,
        memory=_samples(sampler),
    )


def aggregate(params: AggregateParams) -> AggregateResult:
    """Weighted average of the input models; optionally evaluated and saved as a Keras file.

    All inputs are held in memory at once (as DiSDeL's aggregators do), which is what
    the planner sizes an aggregation action for.
    """
    group = own_cgroup()
    phases = {"start": time.time()}
    with MemorySampler(group) as sampler:
        models = [weight_files.load(item.weights) for item in params.inputs]
        samples = [item.samples for item in params.inputs]
        averaged = weight_files.weighted_average(models, samples)
        del models
        release_memory()
        weight_files.save(params.out_weights, averaged)
        phases["averaged"] = time.time()
        loss = accuracy = model_path = None
        if params.model is not None and (params.evaluate or params.save_model):
            _tensorflow(params.threads)
            model = _model(params.model)
            model.set_weights(averaged)
            if params.evaluate:
                x, y = _load_shard(params.evaluate)
                scores = model.evaluate(x, y, batch_size=params.batch_size, verbose=0, return_dict=True)
                loss, accuracy = float(scores["loss"]), scores.get("accuracy", scores.get("compile_metrics"))
                accuracy = None if accuracy is None else float(accuracy)
            if params.save_model:
                Path(params.save_model).parent.mkdir(parents=True, exist_ok=True)
                model_path = str(write_shared(params.save_model, model.save))
            phases["evaluated"] = time.time()
    return AggregateResult(
        key=params.key,
        weights=params.out_weights,
        samples=sum(samples),
        eval_loss=loss,
        eval_accuracy=accuracy,
        model_path=model_path,
        peak_memory_bytes=peak_bytes(group),
        phases=phases,
        memory=_samples(sampler),
    )
