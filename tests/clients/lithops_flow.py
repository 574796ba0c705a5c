"""Lithops, unmodified, against an owx gateway: ``python lithops_flow.py CONFIG.yaml`` prints what it saw."""

from __future__ import annotations

import json
import sys
import time

import lithops
import yaml


def add_seven(x):
    return x + 7


def square(x):
    return x * x


def total(results):
    return sum(results)


def main(config_path: str) -> None:
    with open(config_path) as handle:
        config = yaml.safe_load(handle)
    executor = lithops.FunctionExecutor(config=config)
    seen = {}
    started = time.monotonic()
    executor.call_async(add_seven, 3)
    seen["call_async"] = executor.get_result()
    seen["call_async_s"] = time.monotonic() - started
    started = time.monotonic()
    executor.map(square, range(100))
    seen["map"] = executor.get_result()
    seen["map_s"] = time.monotonic() - started
    started = time.monotonic()
    executor.map_reduce(square, range(20), total)
    seen["map_reduce"] = executor.get_result()
    seen["map_reduce_s"] = time.monotonic() - started
    executor.clean()
    print(json.dumps(seen))


if __name__ == "__main__":
    main(sys.argv[1])
