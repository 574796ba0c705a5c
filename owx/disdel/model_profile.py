"""What a Keras model costs in memory, read off the model itself (any Functional or Sequential model).

Bytes, not elements, so that dtypes count (mixed precision, float16 or int inputs):

* **state**: the trainable weights and their gradients, the optimizer's own variables
  (read from the optimizer after building it: SGD has none, momentum one slot per
  weight, Adam two, AMSGrad three), non-trainable weights, and under mixed precision the
  compute-dtype copies of the weights.  Embedding tables are kept apart: their sparse
  gradients are densified by the optimizer's update, which costs a different multiple;
* **activations** per sample, by kind, since TensorFlow keeps different amounts per
  element for each: ``conv`` (convolutions and pooling), ``recurrent`` (one gate
  vector per unit and timestep: LSTM 4, GRU 3, SimpleRNN 1, kept for backprop through
  time) and ``dense`` (everything else; attention adds its heads x query x key
  scores).  Normalization, activation, residual ``Add`` and reshaping layers are fused
  or computed in place by TensorFlow's graph optimizer and are not counted;
* **layers**: graph and kernel state grow with depth.

The estimator turns these into bytes of a training action with coefficients measured
per runtime (:mod:`owx.disdel.calibration`).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, Field

ActivationKind = Literal["dense", "conv", "recurrent"]
KINDS: tuple[ActivationKind, ...] = ("dense", "conv", "recurrent")
FUSED_LAYERS = frozenset({"BatchNormalization", "ReLU", "Activation", "Add", "Flatten", "Reshape", "Dropout",
                          "InputLayer", "Rescaling"})
GATES = {"LSTM": 4, "GRU": 3, "SimpleRNN": 1}
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1, "int32": 4,
               "int64": 8, "bool": 1}


class ModelProfile(BaseModel):
    """Sizes in bytes that the memory estimator multiplies by the runtime's coefficients."""

    model_config = {"protected_namespaces": ()}

    name: str
    params: int
    weights_bytes: int = Field(description="every weight in its variable dtype (what an aggregator holds per model)")
    state_bytes: int = Field(description="weights + gradients + optimizer slots + compute copies, embeddings excluded")
    embedding_state_bytes: int = Field(0, description="the same for embedding tables")
    activation_bytes: dict[ActivationKind, int] = Field(description="bytes kept for backprop per sample, by kind")
    layers: int
    optimizer: str = ""

    @property
    def activations_per_sample(self) -> int:
        return sum(self.activation_bytes.values())


def _elements(shape: Any) -> int:
    dims = [d for d in tuple(shape)[1:] if d is not None]
    return math.prod(dims) if dims else 1


def _bytes(variable: Any) -> int:
    return math.prod(variable.shape) * DTYPE_BYTES.get(str(variable.dtype).split(".")[-1], 4)


def _leaf_layers(model: Any) -> list[Any]:
    """Every layer called in the model's graph (nested models' too; not an RNN's cell)."""
    return [layer for layer in model._flatten_layers(include_self=False, recursive=True)
            if getattr(layer, "_inbound_nodes", None) and type(layer).__name__ not in ("Functional", "Sequential")]


def _recurrent(layer: Any) -> list[Any]:
    """The recurrent layers inside ``layer`` (itself, or both directions of a ``Bidirectional``)."""
    if type(layer).__name__ == "Bidirectional":
        return [layer.forward_layer, layer.backward_layer]
    return [layer] if type(layer).__name__ in GATES else []


def _activation(layer: Any, compute_bytes: int) -> tuple[ActivationKind, int]:
    """Bytes per sample that backprop keeps for ``layer``'s outputs, and their kind."""
    name = type(layer).__name__
    outputs = layer.output if isinstance(layer.output, (list, tuple)) else [layer.output]
    out = sum(_elements(o.shape) for o in outputs)
    if cells := _recurrent(layer):
        steps = layer.input.shape[1] or 1
        gates = sum(steps * GATES[type(c).__name__] * c.units for c in cells)
        return "recurrent", compute_bytes * (out + gates)
    if name == "MultiHeadAttention":
        query = layer.input[0] if isinstance(layer.input, (list, tuple)) else layer.input
        steps = query.shape[1] or 1
        heads, key_dim = layer._num_heads, layer._key_dim
        scores = 2 * heads * steps * steps  # logits and softmax
        projections = 3 * heads * steps * key_dim
        return "dense", compute_bytes * (out + scores + projections)
    kind: ActivationKind = "conv" if "Conv" in name or "Pooling" in name else "dense"
    return kind, compute_bytes * out


def optimizer_slot_bytes(model: Any) -> int:
    """Bytes of the optimizer's per-weight variables (moments etc.), building it if needed."""
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        return 0
    if not optimizer.built:
        optimizer.build(model.trainable_variables)
    return sum(_bytes(v) for v in optimizer.variables if len(v.shape) > 0)


def profile_model(model: Any) -> ModelProfile:
    """Profile a built, compiled Keras model (its optimizer is built here if it was not)."""
    layers = _leaf_layers(model)
    activations = dict.fromkeys(KINDS, 0)
    embedding_ids: set[int] = set()
    casts = 0
    for layer in layers:
        policy = layer.dtype_policy
        compute_bytes = DTYPE_BYTES.get(policy.compute_dtype, 4)
        if type(layer).__name__ == "Embedding":
            embedding_ids |= {id(w) for w in layer.trainable_weights}
        if compute_bytes != DTYPE_BYTES.get(policy.variable_dtype, 4):  # mixed precision: a cast copy per step
            casts += sum(math.prod(w.shape) for w in layer.trainable_weights) * compute_bytes
        if type(layer).__name__ not in FUSED_LAYERS:
            kind, size = _activation(layer, compute_bytes)
            activations[kind] += size
    trainable = model.trainable_weights
    embedding = sum(_bytes(w) for w in trainable if id(w) in embedding_ids)
    dense = sum(_bytes(w) for w in trainable) - embedding
    slots = optimizer_slot_bytes(model)
    slots_per_byte = slots / max(1, dense + embedding)
    frozen = sum(_bytes(w) for w in model.non_trainable_weights)
    return ModelProfile(
        name=model.name,
        params=int(model.count_params()),
        weights_bytes=sum(_bytes(w) for w in model.weights),
        state_bytes=int(dense * (2 + slots_per_byte) + frozen + casts),
        embedding_state_bytes=int(embedding * (2 + slots_per_byte)),
        activation_bytes=activations,
        layers=sum(1 for layer in layers if type(layer).__name__ != "InputLayer"),
        optimizer=type(model.optimizer).__name__ if getattr(model, "optimizer", None) is not None else "",
    )
