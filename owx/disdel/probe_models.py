"""The calibration's probe models: each makes one term of the estimate dominate its peak.

They are built into owx (the probe actions build them by name) and are deliberately
unlike the models DiSDeL's benchmark scores the estimator on: plain stacks of one layer
kind each, so a coefficient measured on one tells nothing about a particular model.
"""

from __future__ import annotations

from typing import Any, Callable


def _head(keras: Any, inputs: Any, x: Any, classes: int, name: str) -> Any:
    return keras.Model(inputs, keras.layers.Dense(classes, activation="softmax")(x), name=name)


def tiny(keras: Any, shape: tuple[int, ...], classes: int) -> Any:
    """The runtime itself: one small dense layer."""
    inputs = keras.Input(shape)
    return _head(keras, inputs, keras.layers.Dense(4, activation="relu")(inputs), classes, "probe_tiny")


def _dense_stack(keras: Any, shape: tuple[int, ...], classes: int, depth: int, width: int, name: str) -> Any:
    inputs = keras.Input(shape)
    x = inputs
    for _ in range(depth):
        x = keras.layers.Dense(width, activation="relu")(x)
    return _head(keras, inputs, x, classes, name)


def deep(keras: Any, shape: tuple[int, ...], classes: int) -> Any:
    """Many small layers: graph and kernel state per layer."""
    return _dense_stack(keras, shape, classes, 24, 8, "probe_deep")


def wide(keras: Any, shape: tuple[int, ...], classes: int) -> Any:
    """Millions of dense weights, few activations: optimizer state."""
    inputs = keras.Input(shape)
    x = keras.layers.Dense(3072, activation="relu")(inputs)
    x = keras.layers.Dense(3072, activation="relu")(x)
    return _head(keras, inputs, x, classes, "probe_wide")


def table(keras: Any, shape: tuple[int, ...], classes: int) -> Any:
    """A large embedding table looked up by integer inputs: its densified gradient and slots."""
    inputs = keras.Input(shape, dtype="int32")
    x = keras.layers.Embedding(100_000, 64)(inputs)
    return _head(keras, inputs, keras.layers.GlobalAveragePooling1D()(x), classes, "probe_table")


def narrow(keras: Any, shape: tuple[int, ...], classes: int) -> Any:
    """Narrow dense layers trained at a large batch: dense activations."""
    return _dense_stack(keras, shape, classes, 8, 256, "probe_narrow")


def planes(keras: Any, shape: tuple[int, ...], classes: int) -> Any:
    """Unpooled 3x3 convolutions at a large batch: convolution activations."""
    inputs = keras.Input(shape)
    x = inputs
    for _ in range(3):
        x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(x)
    return _head(keras, inputs, keras.layers.GlobalAveragePooling2D()(x), classes, "probe_planes")


def steps(keras: Any, shape: tuple[int, ...], classes: int) -> Any:
    """One LSTM over many timesteps at a large batch: recurrent activations."""
    inputs = keras.Input(shape)
    return _head(keras, inputs, keras.layers.LSTM(64)(inputs), classes, "probe_steps")


PROBES: dict[str, Callable[[Any, tuple[int, ...], int], Any]] = {
    f"probe_{f.__name__}": f for f in (tiny, deep, wide, table, narrow, planes, steps)
}
