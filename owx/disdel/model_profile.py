"""What a model costs in memory, read off the Keras model: parameters and activations."""

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


def profile_model(model: object) -> ModelProfile:
    """Count parameters and the per-sample outputs of every layer (what backprop keeps)."""
    layers = model.layers  # type: ignore[attr-defined]
    activations = 0
    for layer in layers:
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
