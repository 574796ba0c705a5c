"""owx's benchmarks, one package per system (``owx bench NAME``).

Each ``owx.bench.<name>.bench`` module has ``main(argv) -> int``: it starts its
baselines in the same run, prints ratios and goals, and exits non-zero when a
goal fails.
"""

BENCHMARKS = ("invoke", "tenants", "upstream", "canary", "disdel", "escra", "thorn", "sandbox")
