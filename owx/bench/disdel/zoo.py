"""The benchmark's table of models, data and batch sizes that the memory estimator is scored on.

Each model is a zero-argument function (the ``module:function`` form a user's job names);
none is a calibration probe (:mod:`owx.disdel.probe_models`).  Half of the rows (``dev``)
resemble the models looked at while the estimator was designed; the other half
(``held_out``) are families it was never run on before the benchmark: bidirectional GRU
text models, attention, depthwise-separable and 1-D convolutions, a regression net,
mixed precision.  Nothing is fitted on either half: the coefficients come from the
runtime's calibration probes alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal


def _keras() -> Any:
    from owx.disdel.models import _keras as load

    return load()


def _classifier(keras: Any, inputs: Any, x: Any, classes: int = 10, name: str = "m") -> Any:
    return keras.Model(inputs, keras.layers.Dense(classes, activation="softmax", dtype="float32")(x), name=name)


def mlp() -> Any:
    keras = _keras()
    inputs = keras.Input((784,))
    x = keras.layers.Dense(512, activation="relu")(inputs)
    return _classifier(keras, inputs, keras.layers.Dense(256, activation="relu")(x), name="mlp")


def cnn() -> Any:
    keras = _keras()
    layers = keras.layers
    inputs = keras.Input((32, 32, 3))
    x = layers.MaxPooling2D()(layers.Conv2D(32, 3, padding="same", activation="relu")(inputs))
    x = layers.MaxPooling2D()(layers.Conv2D(64, 3, padding="same", activation="relu")(x))
    return _classifier(keras, inputs, layers.Dense(64, activation="relu")(layers.Flatten()(x)), name="cnn")


def cnn_gray() -> Any:
    keras = _keras()
    layers = keras.layers
    inputs = keras.Input((28, 28, 1))
    x = layers.MaxPooling2D()(layers.Conv2D(32, 3, padding="same", activation="relu")(inputs))
    x = layers.Conv2D(64, 3, padding="same", activation="relu")(x)
    return _classifier(keras, inputs, layers.GlobalAveragePooling2D()(x), name="cnn_gray")


def lstm() -> Any:
    keras = _keras()
    inputs = keras.Input((50, 16))
    return _classifier(keras, inputs, keras.layers.LSTM(64)(inputs), name="lstm")


def bag_of_words() -> Any:
    keras = _keras()
    inputs = keras.Input((40,), dtype="int32")
    x = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(50_000, 64)(inputs))
    return _classifier(keras, inputs, keras.layers.Dense(32, activation="relu")(x), 2, name="bag_of_words")


def wide_momentum() -> Any:
    keras = _keras()
    inputs = keras.Input((256,))
    x = keras.layers.Dense(2048, activation="relu")(inputs)
    model = _classifier(keras, inputs, keras.layers.Dense(2048, activation="relu")(x), name="wide_momentum")
    model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9), loss="sparse_categorical_crossentropy")
    return model


def gru_text() -> Any:
    keras = _keras()
    inputs = keras.Input((60,), dtype="int32")
    x = keras.layers.Embedding(20_000, 32)(inputs)
    return _classifier(keras, inputs, keras.layers.Bidirectional(keras.layers.GRU(48))(x), 4, name="gru_text")


def attention() -> Any:
    keras = _keras()
    layers = keras.layers
    inputs = keras.Input((64,), dtype="int32")
    x = layers.Embedding(8000, 64)(inputs)
    x = layers.LayerNormalization()(layers.Add()([x, layers.MultiHeadAttention(4, 16)(x, x)]))
    x = layers.Dense(128, activation="relu")(x)
    return _classifier(keras, inputs, layers.GlobalAveragePooling1D()(x), 2, name="attention")


def separable() -> Any:
    keras = _keras()
    layers = keras.layers
    inputs = keras.Input((48, 48, 3))
    x = layers.Conv2D(32, 3, strides=2, padding="same", use_bias=False)(inputs)
    for filters, stride in ((64, 1), (128, 2), (128, 1)):
        x = layers.ReLU()(layers.BatchNormalization()(layers.DepthwiseConv2D(3, strides=stride, padding="same")(x)))
        x = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(filters, 1, use_bias=False)(x)))
    return _classifier(keras, inputs, layers.GlobalAveragePooling2D()(x), name="separable")


def temporal() -> Any:
    keras = _keras()
    layers = keras.layers
    inputs = keras.Input((256, 4))
    x = layers.MaxPooling1D()(layers.Conv1D(64, 7, padding="same", activation="relu")(inputs))
    x = layers.MaxPooling1D()(layers.Conv1D(128, 5, padding="same", activation="relu")(x))
    return _classifier(keras, inputs, layers.GlobalMaxPooling1D()(x), 6, name="temporal")


def regression() -> Any:
    keras = _keras()
    inputs = keras.Input((200,))
    x = keras.layers.Dropout(0.1)(keras.layers.Dense(512, activation="relu")(inputs))
    x = keras.layers.Dense(128, activation="relu")(x)
    model = keras.Model(inputs, keras.layers.Dense(1)(x), name="regression")
    model.compile(optimizer=keras.optimizers.RMSprop(1e-3), loss="mean_squared_error")
    return model


def mixed_cnn() -> Any:
    keras = _keras()
    layers = keras.layers
    inputs = keras.Input((32, 32, 3))
    x = layers.Conv2D(64, 3, padding="same", activation="relu", dtype="mixed_float16")(inputs)
    x = layers.MaxPooling2D(dtype="mixed_float16")(x)
    x = layers.Conv2D(128, 3, padding="same", activation="relu", dtype="mixed_float16")(x)
    return _classifier(keras, inputs, layers.GlobalAveragePooling2D(dtype="mixed_float16")(x), name="mixed_cnn")


@dataclass(frozen=True)
class Row:
    """One model/data/batch combination of the table."""

    model: str
    shape: tuple[int, ...]
    samples: int
    batch: int
    half: Literal["dev", "held_out"]
    family: str
    tokens: int = 0  # > 0: integer inputs below this (an embedding's vocabulary)
    classes: int | None = 10  # None: real-valued targets

    @property
    def function(self) -> str:
        return f"{__name__}:{self.model}"

    @property
    def label(self) -> str:
        return f"{self.model} {'x'.join(map(str, self.shape))} n={self.samples} b={self.batch}"


TABLE = [
    Row("mlp", (784,), 8000, 64, "dev", "dense"),
    Row("cnn", (32, 32, 3), 3000, 64, "dev", "conv"),
    Row("cnn_gray", (28, 28, 1), 6000, 256, "dev", "conv"),
    Row("lstm", (50, 16), 2000, 128, "dev", "recurrent"),
    Row("bag_of_words", (40,), 4000, 64, "dev", "embedding", tokens=50_000, classes=2),
    Row("wide_momentum", (256,), 2000, 32, "dev", "dense, SGD with momentum"),
    Row("gru_text", (60,), 3000, 64, "held_out", "embedding + bidirectional GRU", tokens=20_000, classes=4),
    Row("attention", (64,), 2000, 32, "held_out", "embedding + multi-head attention", tokens=8000, classes=2),
    Row("separable", (48, 48, 3), 1500, 32, "held_out", "depthwise-separable conv"),
    Row("temporal", (256, 4), 4000, 128, "held_out", "1-D conv", classes=6),
    Row("regression", (200,), 20_000, 256, "held_out", "dense regression, RMSprop", classes=None),
    Row("mixed_cnn", (32, 32, 3), 2000, 128, "held_out", "conv, mixed float16"),
]
