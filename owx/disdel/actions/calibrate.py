"""The calibration probe action: ``from owx.disdel.actions.calibrate import main``.

``{"probe": "prime"}`` trains a small convolutional model one step and returns at once:
run in a container of its own before a job's actions, it reads TensorFlow's libraries
into the page cache, so the kernel charges those pages to it and not to the first
training action of a fresh machine (whose limit is sized for the training itself).
``{"probe": "train", "params": [run, ...]}`` trains each run in turn in this container;
``{"probe": "aggregate", "params": {...}}`` averages once.  The result is the
container's peak memory after each run: ``{"peaks": [...]}``.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from owx.disdel.messages import AggregateParams, TrainParams
from owx.disdel.usage import own_cgroup, peak_bytes
from owx.disdel.worker import aggregate, train


def prime() -> None:
    import numpy as np

    from owx.disdel.models import build_model

    model = build_model("small_cnn", (8, 8, 1), 2)
    model.fit(np.zeros((4, 8, 8, 1), np.float32), np.zeros(4, np.int32), batch_size=2, epochs=1, verbose=0)


def main(args: dict[str, Any]) -> dict[str, Any]:
    probe, params = args.get("probe"), args.get("params")
    try:
        if probe == "prime":
            prime()
            peaks = [peak_bytes(own_cgroup())]
        elif probe == "train" and isinstance(params, list) and params:
            runs = [TrainParams.model_validate(p) for p in params]
            peaks = []
            for run in runs:
                train(run)
                peaks.append(peak_bytes(own_cgroup()))
        elif probe == "aggregate":
            aggregate(AggregateParams.model_validate(params or {}))
            peaks = [peak_bytes(own_cgroup())]
        else:
            return {"error": f"probe must be 'prime', 'train' (with a list of runs) or 'aggregate', got {probe!r}"}
    except ValidationError as exc:
        return {"error": f"invalid probe parameters: {exc.errors()[0]['msg']}"}
    if any(p is None for p in peaks):
        return {"error": "this container's memory cgroup cannot be read"}
    return {"peaks": peaks}
