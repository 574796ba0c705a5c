"""Two owx gateways that share nothing, loaded at once: the most splitting owx into processes could give.

Each is a whole ``owx up`` (its own data dir, platform and stores, so no state is shared and no lock
is contended between them). wrk drives each at 2 connections, both at the same time: 4 in all, as
the c4 series. Their summed rate is what owx's invocation path reaches at c4 when one interpreter
lock no longer bounds it, only the machine's cores at today's CPU per invocation. A figure, not a
goal: it tells whether more processes alone could meet the c4 goal.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from owx.bench.gateway_process import GatewayProcess, start_gateway_process
from owx.bench.wrk import WrkResult, wrk


def shared_nothing_rates(first: GatewayProcess, first_invoke: str, data_dir: Path, env: dict[str, str],
                         deploy: Callable[[GatewayProcess], str], seconds: float, body: str) -> list[WrkResult]:
    """Start a second gateway like ``first`` in ``data_dir``, deploy the action with ``deploy``, warm
    it, then load both at 2 connections each for ``seconds``; each gateway's wrk result."""
    second = start_gateway_process(data_dir, env=env)
    try:
        targets = [(first, f"{first_invoke}?blocking=true&result=true"),
                   (second, f"{deploy(second)}?blocking=true&result=true")]
        wrk(targets[1][1], connections=2, seconds=2, method="POST", body=body, auth=second.auth)  # warm up
        with ThreadPoolExecutor(len(targets)) as pool:
            loads = [pool.submit(wrk, url, connections=2, seconds=seconds, method="POST", body=body,
                                 auth=gateway.auth, threads=1) for gateway, url in targets]
            return [load.result() for load in loads]
    finally:
        second.stop()
