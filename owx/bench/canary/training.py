"""The paper-like workload of ``owx bench canary``: a TensorFlow training action.

An MLP classifier (kind ``python:tensorflow``, one CPU thread) trained with plain SGD on
MNIST-shaped data the action generates from a seed (labels from a random linear teacher,
so the loss falls), for ``epochs`` epochs — 50, as the Canary chapter's ResNet50 runs — with
an explicit checkpoint of the weights after every epoch (``owx.canary.checkpoint.Checkpointer``).
16,384 samples an epoch make an activation last over a minute on this VM (about 1.3 s an epoch),
the shortest training the evidence issue accepts as paper-like.

After each epoch the action appends the epoch's effect to the bench's effect log
(:mod:`owx.bench.canary.effects`), then saves the checkpoint; it appends its result line
just before returning. It announces its container for the fault injector
(:mod:`owx.bench.canary.containers`). With ``checkpoint: false`` it neither saves nor restores (a control).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from owx.bench.canary.containers import ANNOUNCE
from owx.bench.canary.effects import ACTION_SIDE


@dataclass(frozen=True)
class TrainingWorkload:
    """The parameters of one training activation (reported with the figures)."""

    epochs: int = 50
    samples: int = 16384
    features: int = 784
    hidden: tuple[int, ...] = (512, 256)
    classes: int = 10
    batch: int = 64
    learning_rate: float = 0.05

    @property
    def parameters(self) -> int:
        sizes = (self.features, *self.hidden, self.classes)
        return sum(a * b + b for a, b in zip(sizes, sizes[1:]))

    @property
    def model_mb(self) -> float:
        return self.parameters * 4 / 2**20

    def params(self, seed: int) -> dict[str, Any]:
        return {**asdict(self), "hidden": list(self.hidden), "seed": seed}


TRAINING = ACTION_SIDE + ANNOUNCE + '''
import numpy as np
import tensorflow as tf
from owx.canary.checkpoint import Checkpointer

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)

def _data(args):
    rng = np.random.default_rng(args["seed"])
    x = rng.standard_normal((args["samples"], args["features"]), dtype=np.float32)
    teacher = rng.standard_normal((args["features"], args["classes"]), dtype=np.float32)
    return x, np.argmax(x @ teacher, axis=1).astype(np.int32)

def _initial(args):
    rng = np.random.default_rng(args["seed"] + 1)
    sizes = [args["features"], *args["hidden"], args["classes"]]
    weights = {}
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        weights["w%d" % i] = (rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32)
        weights["b%d" % i] = np.zeros(b, np.float32)
    return weights

def _trainer(variables, layers, rate):
    def forward(x):
        for i in range(layers):
            x = x @ variables["w%d" % i] + variables["b%d" % i]
            if i < layers - 1:
                x = tf.nn.relu(x)
        return x

    @tf.function(reduce_retracing=True, autograph=False)
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=forward(x)))
        names = sorted(variables)
        for name, grad in zip(names, tape.gradient(loss, [variables[n] for n in names])):
            variables[name].assign_sub(rate * grad)
        return loss
    return step

def main(args):
    _announce(args)
    log = _effect_log(args)
    x, y = _data(args)
    layers = len(args["hidden"]) + 1
    with Checkpointer.from_env() as ckpt:
        restored = ckpt.restore() if args.get("checkpoint", True) else None
        timing = {"resumed_time": time.time(), "restored_time": ckpt.restored.timestamp if restored else None}
        state = restored or {"epoch": 0, "loss": None, **_initial(args)}
        variables = {k: tf.Variable(v) for k, v in state.items() if k[0] in "wb"}
        step = _trainer(variables, layers, args["learning_rate"])
        first = state["epoch"]
        for epoch in range(first, args["epochs"]):
            order = np.random.default_rng(args["seed"] * 1000 + epoch).permutation(len(x))
            losses = [float(step(x[idx], y[idx])) for idx in
                      (order[i:i + args["batch"]] for i in range(0, len(x), args["batch"]))]
            if not (restored and epoch == first and _published(log, epoch)):
                _append(log, "effect", epoch)
            state = {"epoch": epoch + 1, "loss": float(np.mean(losses)),
                     **{k: v.numpy() for k, v in variables.items()}}
            if args.get("checkpoint", True):
                ckpt.save("epoch-%d" % (epoch + 1), **state)
    _append(log, "result", args["epochs"])
    _retire(args)
    return {"attempt": ATTEMPT, "epochs": state["epoch"], "loss": state["loss"], "resumed": first, **timing}
'''
