"""The Keras models DiSDeL trains: users' own (a ``.keras`` file or a ``module:function``)
or one of the named ones built in code with seeded random weights.

Three named families, kept small enough for a 2-core machine: ``small_cnn`` (two conv
layers), ``mobilenet`` (depthwise-separable blocks, MobileNetV1-like) and
``resnet`` (basic residual blocks, ResNet-18-like but shallower).  TensorFlow is
imported on first use only.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

from owx.disdel.messages import ModelRef


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


def _keras() -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    return keras


def _builtin(keras: Any, name: str, shape: tuple[int, ...], classes: int) -> Any:
    from owx.disdel.probe_models import PROBES

    if name in PROBES:
        return PROBES[name](keras, shape, classes)
    if name not in BUILDERS:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(BUILDERS)}")
    inputs = keras.Input(shape=tuple(shape))
    return keras.Model(inputs, BUILDERS[name](keras, inputs, classes), name=name)


def _from_function(function: str, code_dir: str | None) -> Any:
    module_name, _, attribute = function.partition(":")
    if code_dir and code_dir not in sys.path:
        sys.path.insert(0, code_dir)
    model = getattr(importlib.import_module(module_name), attribute)()
    if not hasattr(model, "fit") or not hasattr(model, "layers"):
        raise TypeError(f"{function} returned {type(model).__name__}, not a keras.Model")
    return model


def _default_loss(keras: Any, model: Any, classes: int | None) -> tuple[Any, list[str]]:
    """Sparse categorical cross-entropy for class labels (on logits unless the model ends in a
    softmax or sigmoid), mean squared error for real-valued targets."""
    if classes is None:
        return "mean_squared_error", []
    activation = getattr(getattr(model.layers[-1], "activation", None), "__name__", "")
    from_logits = activation not in ("softmax", "sigmoid")
    return keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits), ["accuracy"]


def load_model(ref: ModelRef) -> Any:
    """The compiled Keras model ``ref`` names, with seeded initial weights where it builds one."""
    keras = _keras()
    keras.utils.set_random_seed(ref.seed)
    if ref.builtin is not None:
        model = _builtin(keras, ref.builtin, ref.shape or (), ref.classes or 2)
    elif ref.keras_file is not None:
        model = keras.models.load_model(ref.keras_file, compile=True)
    else:
        model = _from_function(ref.function or "", ref.code_dir)
    if not getattr(model, "compiled", False) or getattr(model, "optimizer", None) is None:
        loss, metrics = _default_loss(keras, model, ref.classes)
        model.compile(optimizer=keras.optimizers.Adam(ref.learning_rate), loss=loss, metrics=metrics)
    return model


def build_model(name: str, shape: tuple[int, ...], classes: int, seed: int = 0, learning_rate: float = 1e-3) -> Any:
    """A compiled builtin model (Adam, sparse categorical cross-entropy) with seeded weights."""
    return load_model(ModelRef(builtin=name, shape=tuple(shape), classes=classes, seed=seed,
                               learning_rate=learning_rate))


def stage(spec: Any, shape: tuple[int, ...], classes: int | None, directory: Path, learning_rate: float,
          seed: int) -> ModelRef:
    """A reference to ``spec`` (a job's model) that every action can load: a user's ``.keras`` file
    or module is copied, world-readable, into the job's ``directory``."""
    from owx.disdel.job import BuiltinModel, JobError, KerasFileModel

    if isinstance(spec, BuiltinModel):
        if classes is None:
            raise JobError(f"{spec.name} classifies: the labels must be integer classes")
        return ModelRef(builtin=spec.name, shape=shape, classes=classes, learning_rate=learning_rate, seed=seed)
    if isinstance(spec, KerasFileModel):
        target = directory / "model.keras"
        shutil.copyfile(spec.path, target)
        target.chmod(0o644)
        return ModelRef(keras_file=str(target), classes=classes, learning_rate=learning_rate, seed=seed)
    code = directory / "code"
    source = spec.module_path
    if source.is_dir():
        shutil.copytree(source, code / source.name, dirs_exist_ok=True)
    else:
        code.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, code / source.name)
    for path in [code, *code.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return ModelRef(function=spec.function, code_dir=str(code), classes=classes, learning_rate=learning_rate, seed=seed)


def check_input(model: Any, shape: tuple[int, ...], label: str) -> None:
    """Raise JobError when samples of ``shape`` cannot feed ``model``."""
    from owx.disdel.job import JobError

    expected = tuple(model.inputs[0].shape[1:]) if getattr(model, "inputs", None) else None
    if expected is None or len(model.inputs) != 1:
        raise JobError(f"{label}: DiSDeL trains models with one input (built Functional or Sequential models)")
    if len(expected) != len(shape) or any(e is not None and e != s for e, s in zip(expected, shape)):
        raise JobError(f"{label} takes inputs of shape {expected}, the data's samples have shape {shape}")
