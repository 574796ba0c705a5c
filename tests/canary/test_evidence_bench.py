"""The evidence bench's training action runs as the bench runs it (sandboxed, reaching the bench's
checkpoint and effect-log redis-servers) and its effect log shows each effect once."""

from __future__ import annotations

from pathlib import Path

from owx.bench.canary.evidence import TrainingBench
from owx.bench.canary.training import TrainingWorkload


def test_a_training_activation_completes_and_logs_each_epochs_effect_once(tmp_path: Path) -> None:
    tmp_path.chmod(0o711)
    workload = TrainingWorkload(epochs=2, samples=256)
    bench = TrainingBench(tmp_path, workload, nodes=1, concurrency=1, kind_preload={})
    try:
        run = bench.run("smoke", "train-canary", [None])
    finally:
        bench.close()
    assert run.durations_s and run.kills == 0
    effects = run.effects
    assert (effects.activations, effects.lost, effects.doubled, effects.attempts) == (1, 0, 0, 1), effects
