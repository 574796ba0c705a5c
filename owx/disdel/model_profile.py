"""What a model costs in memory, read off the Keras model: parameters, activations, depth.

Only *materialized* activations are counted: outputs of layers with weights and of
pooling layers.  Normalization, activation, residual ``Add`` and reshaping layers are
fused or computed in place by TensorFlow's graph optimizer (measured here: counting
them overstated MobileNet's batch-dependent memory about threefold).
"""

from __future__ import annotations

import math

from pydantic import BaseModel


class ModelProfile(BaseModel):
    """Sizes (in elements, float32) that the memory estimator turns into bytes."""

    model_config = {"protected_namespaces": ()}

    name: str
    params: int
    trainable: int
    activations_per_sample: int
    layers: int

    @property
    def weights_bytes(self) -> int:
        return 4 * self.params


def _elements(shape: object) -> int:
    dims = [d for d in tuple(shape)[1:] if d is not None]  # type: ignore[arg-type]
    return math.prod(dims) if dims else 1


FUSED_LAYERS = frozenset({"BatchNormalization", "ReLU", "Activation", "Add", "Flatten", "Reshape", "Dropout", "InputLayer"})


def profile_model(model: object) -> ModelProfile:
    """Count parameters and the per-sample materialized outputs (what backprop keeps)."""
    layers = model.layers  # type: ignore[attr-defined]
    activations = 0
    for layer in layers:
        if type(layer).__name__ in FUSED_LAYERS:
            continue
        outputs = layer.output if isinstance(layer.output, (list, tuple)) else [layer.output]
        activations += sum(_elements(out.shape) for out in outputs)
    trainable = sum(math.prod(w.shape) for w in model.trainable_weights)  # type: ignore[attr-defined]
    return ModelProfile(
        name=model.name,  # type: ignore[attr-defined]
        params=int(model.count_params()),  # type: ignore[attr-defined]
        trainable=int(trainable),
        activations_per_sample=int(activations),
        layers=len(layers),
    )
