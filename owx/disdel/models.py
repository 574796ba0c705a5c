"""The named Keras models DiSDeL trains, built in code with seeded random weights.

Three families, kept small enough for a 2-core machine: ``small_cnn`` (two conv
layers), ``mobilenet`` (depthwise-separable blocks, MobileNetV1-like) and
``resnet`` (basic residual blocks, ResNet-18-like but shallower).  TensorFlow is
imported on first use only.
"""

from __future__ import annotations

import os
from typing import Any, Callable


def _small_cnn(keras: Any, inputs: Any, classes: int) -> Any:
    layers = keras.layers
    x = layers.Conv2D(32, 3, padding="same", activation="relu")(inputs)
    x = layers.MaxPooling2D()(x)
    x = layers.Conv2D(64, 3, padding="same", activation="relu")(x)
    x = layers.MaxPooling2D()(x)
    x = layers.Flatten()(x)
    x = layers.Dense(128, activation="relu")(x)
    return layers.Dense(classes, activation="softmax")(x)


def _mobilenet(keras: Any, inputs: Any, classes: int) -> Any:
    layers = keras.layers

    def conv_bn(x: Any, filters: int, stride: int) -> Any:
        x = layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False)(x)
        x = layers.BatchNormalization()(x)
        return layers.ReLU(6.0)(x)

    def separable(x: Any, filters: int, stride: int) -> Any:
        x = layers.DepthwiseConv2D(3, strides=stride, padding="same", use_bias=False)(x)
        x = layers.BatchNormalization()(x)
        x = layers.ReLU(6.0)(x)
        x = layers.Conv2D(filters, 1, use_bias=False)(x)
        x = layers.BatchNormalization()(x)
        return layers.ReLU(6.0)(x)

    x = conv_bn(inputs, 32, 1)
    for filters, stride in ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1)):
        x = separable(x, filters, stride)
    x = layers.GlobalAveragePooling2D()(x)
    return layers.Dense(classes, activation="softmax")(x)


def _resnet(keras: Any, inputs: Any, classes: int) -> Any:
    layers = keras.layers

    def block(x: Any, filters: int, stride: int) -> Any:
        shortcut = x
        y = layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False)(x)
        y = layers.BatchNormalization()(y)
        y = layers.ReLU()(y)
        y = layers.Conv2D(filters, 3, padding="same", use_bias=False)(y)
        y = layers.BatchNormalization()(y)
        if stride != 1 or shortcut.shape[-1] != filters:
            shortcut = layers.Conv2D(filters, 1, strides=stride, use_bias=False)(shortcut)
            shortcut = layers.BatchNormalization()(shortcut)
        return layers.ReLU()(layers.Add()([y, shortcut]))

    x = layers.Conv2D(32, 3, padding="same", use_bias=False)(inputs)
    x = layers.BatchNormalization()(x)
    x = layers.ReLU()(x)
    for filters, stride in ((32, 1), (64, 2), (128, 2)):
        x = block(x, filters, stride)
        x = block(x, filters, 1)
    x = layers.GlobalAveragePooling2D()(x)
    return layers.Dense(classes, activation="softmax")(x)


BUILDERS: dict[str, Callable[[Any, Any, int], Any]] = {
    "small_cnn": _small_cnn,
    "mobilenet": _mobilenet,
    "resnet": _resnet,
}


def build_model(name: str, shape: tuple[int, int, int], classes: int, seed: int = 0, learning_rate: float = 1e-3) -> Any:
    """A compiled Keras model (Adam, sparse categorical cross-entropy) with seeded weights."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    if name not in BUILDERS:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(BUILDERS)}")
    keras.utils.set_random_seed(seed)
    inputs = keras.Input(shape=tuple(shape))
    model = keras.Model(inputs, BUILDERS[name](keras, inputs, classes), name=name)
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model
