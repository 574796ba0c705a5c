"""The calibration probe action: ``from owx.disdel.actions.calibrate import main``.

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


def main(args: dict[str, Any]) -> dict[str, Any]:
    probe, params = args.get("probe"), args.get("params")
    try:
        if probe == "train" and isinstance(params, list) and params:
            runs = [TrainParams.model_validate(p) for p in params]
            peaks = []
            for run in runs:
                train(run)
                peaks.append(peak_bytes(own_cgroup()))
        elif probe == "aggregate":
            aggregate(AggregateParams.model_validate(params or {}))
            peaks = [peak_bytes(own_cgroup())]
        else:
            return {"error": f"probe must be 'train' (with a list of runs) or 'aggregate', got {probe!r}"}
    except ValidationError as exc:
        return {"error": f"invalid probe parameters: {exc.errors()[0]['msg']}"}
    if any(p is None for p in peaks):
        return {"error": "this container's memory cgroup cannot be read"}
    return {"peaks": peaks}
