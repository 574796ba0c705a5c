"""Two owx gateways that share nothing, loaded at once: the most splitting owx into processes could give.

Each is a whole ``owx up`` (its own data dir, platform and stores, so no state is shared and no lock
is contended between them). wrk drives the first alone at 4 connections, then each at 2 connections
at the same time (4 in all), in the same minute. The two's summed rate is what owx's invocation path
reaches at c4 when one interpreter lock no longer bounds it, only the machine's cores at today's CPU
per invocation; over the one gateway's, it is what splitting owx into processes could gain at most.
A figure, not a goal: it tells whether more processes alone could meet the c4 goal.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from owx.bench.gateway_process import GatewayProcess, start_gateway_process
from owx.bench.wrk import WrkResult, wrk


@dataclass(frozen=True)
class SharedNothing:
    """``first`` alone at 4 connections, then ``first`` and a second gateway at 2 each, in the same minute."""

    alone: WrkResult
    together: list[WrkResult]

    @property
    def speedup(self) -> float:
        """The two gateways' summed rate over the one gateway's."""
        return sum(r.rate for r in self.together) / self.alone.rate


def shared_nothing(first: GatewayProcess, first_invoke: str, data_dir: Path, env: dict[str, str],
                   deploy: Callable[[GatewayProcess], str], seconds: float, body: str) -> SharedNothing:
    """Start a second gateway like ``first`` in ``data_dir`` and deploy the action with ``deploy``; load
    ``first`` alone at 4 connections for ``seconds``, then both at 2 connections each (at once)."""
    second = start_gateway_process(data_dir, env=env)
    try:
        first_url = f"{first_invoke}?blocking=true&result=true"
        second_url = f"{deploy(second)}?blocking=true&result=true"
        wrk(second_url, connections=2, seconds=2, method="POST", body=body, auth=second.auth)  # warm up
        alone = wrk(first_url, connections=4, seconds=seconds, method="POST", body=body, auth=first.auth)
        with ThreadPoolExecutor(2) as pool:
            loads = [pool.submit(wrk, url, connections=2, seconds=seconds, method="POST", body=body,
                                 auth=gateway.auth, threads=1)
                     for gateway, url in ((first, first_url), (second, second_url))]
            return SharedNothing(alone, [load.result() for load in loads])
    finally:
        second.stop()
