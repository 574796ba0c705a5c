"""The calibration probe action: ``from owx.disdel.actions.calibrate import main``.

``{"probe": "baseline"}`` loads TensorFlow and trains the smallest model one step;
``{"probe": "train" | "aggregate", "params": {...}}`` runs one training / aggregation.  Either
way the result is the peak memory of the container it ran in.
"""

from __future__ import annotations

from typing import Any

from owx.disdel.messages import AggregateParams, TrainParams
from owx.disdel.usage import own_cgroup, peak_bytes
from owx.disdel.worker import aggregate, baseline_probe, train


def main(args: dict[str, Any]) -> dict[str, Any]:
    probe = args.get("probe")
    if probe == "baseline":
        baseline_probe()
    elif probe == "train":
        train(TrainParams.model_validate(args.get("params") or {}))
    elif probe == "aggregate":
        aggregate(AggregateParams.model_validate(args.get("params") or {}))
    else:
        return {"error": f"probe must be 'baseline', 'train' or 'aggregate', got {probe!r}"}
    return {"peak_memory_bytes": peak_bytes(own_cgroup())}
