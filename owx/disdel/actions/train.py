"""The training action: ``from owx.disdel.actions.train import main``.

It also accepts aggregation parameters (``inputs``): the executor runs a job's final
aggregation in a warm training container, where TensorFlow and the model are already
loaded, whenever that aggregation fits the training action's memory.
"""

from __future__ import annotations

from typing import Any

from owx.disdel.actions import entry
from owx.disdel.messages import AggregateParams, TrainParams
from owx.disdel.worker import aggregate, train

_train = entry(TrainParams, train)
_aggregate = entry(AggregateParams, aggregate)


def main(args: dict[str, Any]) -> dict[str, Any]:
    return _aggregate(args) if "inputs" in args else _train(args)
