"""Memory estimator: how much one training or aggregation action needs.

    m_e = safety x ( baseline + per_layer x (layers - baseline_layers)
          + f_state x state + f_embedding x embedding_state
          + batch x sum over kinds k of f_k x activation_bytes_k
          + f_data x shard_bytes )       (f_warm_data when the container runs several rounds)

Before a job, DiSDeL also trains the job's own model for one epoch at the job's batch on two
prefixes of its data, each in a fresh container (:func:`owx.disdel.calibration.measure_step`);
with those two measured peaks the estimate is the line through them, extrapolated to the shard.
What TensorFlow keeps per element differs by layer kind, size and batch more than per-kind
coefficients capture (-25 % on some models, measured), and so does what it keeps per sample of
data: 2-3x the data's bytes for a dense model, 4-8x for a convolutional one on this machine, so
no one runtime-wide data factor fits both.
Without it, the sizes (state, activation bytes per sample by kind, layers) come from the model's
own profile (:mod:`owx.disdel.model_profile`); the shard's bytes from the data.  The
coefficients are not constants: they are measured once per runtime (interpreter +
TensorFlow version) by :mod:`owx.disdel.calibration`, on probe models that are not any
job's model: what this TensorFlow keeps per byte of optimizer state, per byte of
activation of each kind, per byte of training data (NumPy's copy, TensorFlow's tensor,
the shuffled epoch), and per layer.  ``safety`` covers allocator slack and the
run-to-run spread of the runtime itself (the baseline varied by 8 % across probes in one
session: 258-279 MiB), so it multiplies the whole estimate.  An aggregator holds every input model plus the average (and,
when it evaluates, the evaluation data and a forward pass over one evaluation batch).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, Field

from owx.disdel.model_profile import KINDS, ActivationKind, ModelProfile

MB = 1024 * 1024
CALIBRATION_FORMAT = 3  # 3: measured with glibc's mmap threshold pinned (owx.common.malloc)


class RuntimeCalibration(BaseModel):
    """Measured once per runtime (interpreter + TensorFlow version), cached under the data dir."""

    format: int = CALIBRATION_FORMAT
    runtime: str
    baseline_bytes: int = Field(gt=0, description="the runtime with TensorFlow loaded and a tiny model trained")
    light_baseline_bytes: int = Field(gt=0, description="the runtime averaging weights with NumPy only (no TensorFlow)")
    baseline_layers: int = Field(ge=0)
    per_layer_bytes: int = Field(ge=0)
    state_factor: float = Field(ge=0, description="bytes per byte of weights + gradients + optimizer slots")
    embedding_factor: float = Field(ge=0, description="the same for embedding tables")
    activation_factor: dict[ActivationKind, float] = Field(description="bytes per byte of activations, by kind")
    data_factor: float = Field(ge=0, description="bytes per byte of the shard, one training run")
    warm_data_factor: float = Field(ge=0, description="the same in a container that already trained on a shard")
    safety: float = Field(1.1, ge=1.0)
    measured_at: float = 0.0


class MeasuredStep(BaseModel):
    """The job's own model trained one epoch at the job's batch on its first ``samples`` and on its
    first ``more_samples`` samples, each in a fresh container of the runtime: the peaks hold every
    model-specific cost, modelled or not, and their difference what each further sample adds."""

    peak_bytes: int = Field(gt=0)
    samples: int = Field(ge=1)
    more_peak_bytes: int = Field(gt=0)
    more_samples: int = Field(ge=1)
    batch: int = Field(ge=1)

    def bytes_per_sample(self, sample_bytes: int) -> float:
        """The measured growth per sample, at least the sample itself (a smaller growth is noise)."""
        grown = (self.more_peak_bytes - self.peak_bytes) / max(1, self.more_samples - self.samples)
        return max(float(sample_bytes), grown)


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
    measured: int = 0  # the smaller measured run's peak above the baseline (then graph, state and activations are 0)

    @property
    def total(self) -> int:
        variable = self.graph + self.model_state + self.activations + self.data + self.inputs + self.measured
        return int(self.safety * (self.baseline + variable))

    @property
    def mb(self) -> int:
        return -(-self.total // MB)

    def breakdown(self) -> dict[str, int]:
        return {"baseline": self.baseline, "graph": self.graph, "model_state": self.model_state,
                "activations": self.activations, "measured_step": self.measured, "data": self.data,
                "inputs": self.inputs, "total": self.total}


class MemoryEstimator:
    """Estimates per-action memory from a model profile and the runtime's calibration."""

    def __init__(self, calibration: RuntimeCalibration) -> None:
        self.calibration = calibration

    def _graph(self, profile: ModelProfile) -> int:
        extra_layers = max(0, profile.layers - self.calibration.baseline_layers)
        return self.calibration.per_layer_bytes * extra_layers

    def _state(self, profile: ModelProfile) -> int:
        c = self.calibration
        return int(c.state_factor * profile.state_bytes + c.embedding_factor * profile.embedding_state_bytes)

    def _activations(self, profile: ModelProfile, batch: int) -> int:
        factors = self.calibration.activation_factor
        return int(batch * sum(factors[k] * profile.activation_bytes.get(k, 0) for k in KINDS))

    def training(self, profile: ModelProfile, batch_size: int, shard_samples: int, sample_bytes: int,
                 warm: bool = False, step: MeasuredStep | None = None) -> MemoryEstimate:
        """One training action on ``shard_samples`` samples with mini-batches of ``batch_size``;
        ``warm``: its container runs several rounds.  With a measured ``step`` of this model at this
        batch, the line through its two peaks; otherwise computed from the profile."""
        c = self.calibration
        factor = c.warm_data_factor if warm else c.data_factor
        if step is not None and step.batch == batch_size:
            # what a further round in the same container adds, per data byte, over the first
            rounds = (c.warm_data_factor - c.data_factor) * shard_samples * sample_bytes if warm else 0
            more = step.bytes_per_sample(sample_bytes) * max(0, shard_samples - step.samples)
            return MemoryEstimate(baseline=c.baseline_bytes, graph=0, model_state=0, activations=0,
                                  data=int(more + rounds), inputs=0,
                                  safety=c.safety, measured=max(0, step.peak_bytes - c.baseline_bytes))
        batch = min(batch_size, max(1, shard_samples))
        return MemoryEstimate(
            baseline=c.baseline_bytes,
            graph=self._graph(profile),
            model_state=self._state(profile),
            activations=self._activations(profile, batch),
            data=int(factor * shard_samples * sample_bytes),
            inputs=0,
            safety=c.safety,
        )

    def aggregation(self, profile: ModelProfile, fan_in: int, eval_samples: int, sample_bytes: int,
                    evaluates: bool = True, warm: bool = False, eval_batch: int = 256) -> MemoryEstimate:
        """One aggregator averaging ``fan_in`` models; with ``evaluates``, also loading TensorFlow and
        the model to score it on ``eval_samples`` (otherwise NumPy only).  ``warm``: its container
        serves several rounds, and grows by about its inputs over them."""
        c = self.calibration
        return MemoryEstimate(
            baseline=c.baseline_bytes if evaluates else c.light_baseline_bytes,
            graph=self._graph(profile) if evaluates else 0,
            model_state=profile.weights_bytes if evaluates else 0,  # evaluation: weights, no gradients or slots
            activations=self._activations(profile, min(eval_batch, eval_samples)) if evaluates else 0,
            data=int(c.data_factor * eval_samples * sample_bytes) if evaluates else 0,
            # the inputs, the average, per-tensor float64 sums
            inputs=(fan_in + 2) * profile.weights_bytes * (2 if warm else 1),
            safety=c.safety,
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
