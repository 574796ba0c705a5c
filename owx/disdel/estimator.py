"""Memory estimator: how much one training or aggregation action needs.

    m_e = baseline + safety x ( per_layer x (layers - baseline_layers)
          + 16 B x params                      weights, gradients, Adam's two moments
          + 3 x 4 B x batch x activations      forward outputs kept for backprop, their gradients,
                                               and the backend's reordered copies (oneDNN)
          + k x shard_samples x sample_bytes)  k = 2: the loaded shard + the copy model.fit feeds from;
                                               k = 4 when the container runs several rounds

``baseline`` (the runtime with TensorFlow loaded and a tiny model trained one step) and
``per_layer`` (graph and kernel state per layer, ~2.5 MB here) are *measured* once per
runtime by :mod:`owx.disdel.calibration`; the structural factors above are what
TensorFlow keeps (checked against cgroup peaks of small CNN / MobileNet / ResNet runs);
A warm container that already trained on a shard keeps about 1.2-1.5 shard-sized
buffers inside TensorFlow (measured: 2,700 samples +38 MiB, 6,000 samples +108 MiB on the
second run, stable afterwards; not released by ``gc``/``malloc_trim``/``clear_session``),
hence k = 4 for multi-round jobs.
``safety`` (default 1.25) covers allocator slack and tf.data's extra buffers on the
model-dependent part (with 1.0, measured peaks exceeded it by up to 17% on data-heavy shards).
An aggregator holds every input model plus the average, plus the evaluation data
and one forward pass over an evaluation batch (the job's batch size).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, Field

from owx.disdel.model_profile import ModelProfile

MB = 1024 * 1024
BYTES_PER_PARAM = 16  # float32 weight + gradient + 2 Adam slots
ACTIVATION_COPIES = 3  # with 2, a small CNN at batch 128 peaked at its estimate
DATA_COPIES = 2
WARM_DATA_COPIES = 4


class RuntimeCalibration(BaseModel):
    """Measured once per runtime (interpreter + TensorFlow version), cached under the data dir."""

    runtime: str
    baseline_bytes: int = Field(gt=0)
    light_baseline_bytes: int = Field(gt=0, description="the runtime averaging weights with NumPy only (no TensorFlow)")
    baseline_layers: int = Field(ge=0)
    per_layer_bytes: int = Field(ge=0)
    safety: float = Field(1.25, ge=1.0)
    measured_at: float = 0.0


@dataclass(frozen=True)
class MemoryEstimate:
    """An estimate and its parts, in bytes."""

    baseline: int
    graph: int
    model_state: int
    activations: int
    data: int
    inputs: int
    safety: float

    @property
    def total(self) -> int:
        variable = self.graph + self.model_state + self.activations + self.data + self.inputs
        return int(self.baseline + self.safety * variable)

    @property
    def mb(self) -> int:
        return -(-self.total // MB)

    def breakdown(self) -> dict[str, int]:
        return {"baseline": self.baseline, "graph": self.graph, "model_state": self.model_state,
                "activations": self.activations, "data": self.data, "inputs": self.inputs, "total": self.total}


class MemoryEstimator:
    """Estimates per-action memory from a model profile and the runtime's calibration."""

    def __init__(self, calibration: RuntimeCalibration) -> None:
        self.calibration = calibration

    def _graph(self, profile: ModelProfile) -> int:
        extra_layers = max(0, profile.layers - self.calibration.baseline_layers)
        return self.calibration.per_layer_bytes * extra_layers

    def training(self, profile: ModelProfile, batch_size: int, shard_samples: int, sample_bytes: int,
                 warm: bool = False) -> MemoryEstimate:
        """One training action on ``shard_samples`` samples with mini-batches of ``batch_size``;
        ``warm``: its container runs several rounds."""
        batch = min(batch_size, max(1, shard_samples))
        return MemoryEstimate(
            baseline=self.calibration.baseline_bytes,
            graph=self._graph(profile),
            model_state=BYTES_PER_PARAM * profile.params,
            activations=ACTIVATION_COPIES * 4 * batch * profile.activations_per_sample,
            data=(WARM_DATA_COPIES if warm else DATA_COPIES) * shard_samples * sample_bytes,
            inputs=0,
            safety=self.calibration.safety,
        )

    def aggregation(self, profile: ModelProfile, fan_in: int, eval_samples: int, sample_bytes: int,
                    evaluates: bool = True, warm: bool = False, eval_batch: int = 256) -> MemoryEstimate:
        """One aggregator averaging ``fan_in`` models; with ``evaluates``, also loading TensorFlow and
        the model to score it on ``eval_samples`` (otherwise NumPy only).  ``warm``: its container
        serves several rounds, and grows by about its inputs over them (measured 39 -> 45 MiB)."""
        return MemoryEstimate(
            baseline=self.calibration.baseline_bytes if evaluates else self.calibration.light_baseline_bytes,
            graph=self._graph(profile) if evaluates else 0,
            model_state=4 * profile.params if evaluates else 0,
            activations=4 * min(eval_batch, eval_samples) * profile.activations_per_sample if evaluates else 0,
            data=DATA_COPIES * eval_samples * sample_bytes if evaluates else 0,
            # the inputs, the average, per-tensor float64 sums
            inputs=(fan_in + 2) * profile.weights_bytes * (2 if warm else 1),
            safety=self.calibration.safety,
        )

    def aggregation_increment(self, profile: ModelProfile, fan_in: int, eval_samples: int,
                              sample_bytes: int, eval_batch: int) -> MemoryEstimate:
        """What an evaluating aggregation adds to a warm training container (TensorFlow and the
        model are already there; the container still holds what training left behind)."""
        full = self.aggregation(profile, fan_in, eval_samples, sample_bytes, eval_batch=eval_batch)
        return MemoryEstimate(baseline=0, graph=0, model_state=0, activations=full.activations, data=full.data,
                              inputs=full.inputs, safety=full.safety)

    def fan_in_limit(self, profile: ModelProfile, memory_max: int, eval_samples: int, sample_bytes: int) -> int:
        """How many models any aggregator (evaluating, warm) can hold within ``memory_max`` (0 if not one)."""
        fan_in = 0
        while fan_in < 4096 and self.aggregation(profile, fan_in + 1, eval_samples, sample_bytes,
                                                 evaluates=True, warm=True).total <= memory_max:
            fan_in += 1
        return fan_in
