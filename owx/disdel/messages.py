"""What the controller and the training / aggregation actions send each other.

Parameters and results travel as JSON through the gateway; model weights and data
never do: they are ``.npz`` files in the job directory of the shared data dir, and
messages carry their paths.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())


class ModelRef(_Message):
    """Enough to rebuild the same compiled model in any process (hashable: a cache key).

    Exactly one source: a ``builtin`` builder (with ``shape`` and ``classes``), a saved
    ``keras_file``, or a ``function`` (``module:function`` importable from ``code_dir``)
    returning a ``keras.Model``.  A model that comes uncompiled is compiled with Adam at
    ``learning_rate`` and a loss for its labels (:func:`owx.disdel.models.load_model`).
    """

    model_config = ConfigDict(extra="forbid", protected_namespaces=(), frozen=True)

    builtin: str | None = None
    keras_file: str | None = None
    function: str | None = Field(None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    code_dir: str | None = None
    shape: tuple[int, ...] | None = Field(None, description="input shape of a builtin model")
    classes: int | None = Field(None, ge=2, description="label classes; None: regression (mean squared error)")
    learning_rate: float = Field(1e-3, gt=0)
    seed: int = 0

    @model_validator(mode="after")
    def _one_source(self) -> "ModelRef":
        if sum(x is not None for x in (self.builtin, self.keras_file, self.function)) != 1:
            raise ValueError("give exactly one of builtin, keras_file, function")
        if self.builtin is not None and self.shape is None:
            raise ValueError("a builtin model needs its input shape")
        return self


class AggregateInput(_Message):
    weights: str
    samples: int = Field(ge=1)


class TrainParams(_Message):
    """One training action: ``epochs`` epochs on one shard, starting from ``init_weights``."""

    key: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="unique per job: round and shard, e.g. r0-t1")
    job_id: str
    model: ModelRef
    shard: str
    init_weights: str | None = Field(None, description="None: the model's own seeded initial weights")
    init_average: list[AggregateInput] = Field(
        default_factory=list, description="start from these models' weighted average instead of init_weights "
        "(the previous round's outputs, averaged here rather than by a separate aggregation action)")
    out_weights: str
    progress: str = Field(description="file rewritten after every epoch (epoch, loss)")
    epochs: int = Field(ge=1)
    epoch_offset: int = Field(0, ge=0, description="global epochs already done before this action")
    batch_size: int = Field(ge=1)
    target_loss: float = Field(0.0, ge=0.0)
    threads: int = Field(0, ge=0, description="TensorFlow intra/inter-op threads; 0 = TensorFlow's choice")
    checkpoint_store: str | None = Field(None, description="canary store URL when the runtime sets none")

    @model_validator(mode="after")
    def _one_start(self) -> "TrainParams":
        if self.init_weights and self.init_average:
            raise ValueError("give init_weights or init_average, not both")
        return self


class MemorySample(_Message):
    t: float
    bytes: int


class TrainResult(_Message):
    key: str
    weights: str
    samples: int
    epochs_run: int
    losses: list[float]
    stopped_early: bool
    resumed_from_epoch: int = 0
    peak_memory_bytes: int | None
    phases: dict[str, float] = Field(description="wall-clock epoch seconds at start, data_loaded, model_ready, fit_done")
    memory: list[MemorySample] = Field(default_factory=list)

    @property
    def loss(self) -> float:
        return self.losses[-1]


class AggregateParams(_Message):
    """Average ``inputs`` weighted by their sample counts into ``out_weights``.

    With ``evaluate`` the averaged model is also scored on that ``.npz`` file, and
    with ``save_model`` stored as a Keras model file.
    """

    key: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    job_id: str
    inputs: list[AggregateInput] = Field(min_length=1)
    out_weights: str
    model: ModelRef | None = None
    evaluate: str | None = None
    batch_size: int = Field(256, ge=1, description="evaluation batch size")
    save_model: str | None = None
    threads: int = Field(0, ge=0)


class AggregateResult(_Message):
    key: str
    weights: str
    samples: int
    eval_loss: float | None = None
    eval_accuracy: float | None = None
    model_path: str | None = None
    peak_memory_bytes: int | None
    phases: dict[str, float]
    memory: list[MemorySample] = Field(default_factory=list)
