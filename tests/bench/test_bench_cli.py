"""``owx bench``'s command line: ``--help`` of every name answers, and runs nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from owx.bench import BENCHMARKS


@pytest.mark.parametrize("name", ["all", "table", *BENCHMARKS])
def test_help_of_every_bench_name_answers_and_runs_nothing(name: str, tmp_path) -> None:
    """``all`` started every benchmark and ``table`` rewrote results/README.md, whatever followed them."""
    done = subprocess.run([sys.executable, "-m", "owx.cli", "bench", name, "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"owx bench {name}" in done.stdout or "usage:" in done.stdout
    assert not list(tmp_path.iterdir())  # no results written
