"""``owx bench upstream``: the latency owx adds in front of an upstream OpenWhisk.

Both servers run in this run, as processes of their own: the upstream (a stand-in OpenWhisk:
``owx up --no-extensions`` on the embedded platform) and owx in front of it (``owx up --upstream``,
extensions on, as users run it). The bench, a third process, times blocking invocations of the
same warm action sent straight to the upstream and sent through owx, alternating blocks of
``--block`` calls so that both series see the same machine. The upstream is reached over HTTPS,
as an OpenWhisk API host is (its nginx edge terminates TLS), with its certificate verified against
its CA by both owx and the bench; the bench reaches owx over plain HTTP on the same host.

Goal: owx adds at most 2 ms at p50 (p50 through owx - p50 direct). ``--control no-keep-alive``
switches off the pooled connections to the upstream (a new TLS connection per activation).
"""

from __future__ import annotations

import argparse
import secrets
import tempfile
import uuid
from pathlib import Path

from owx.bench.gateway_process import start_gateway_process
from owx.bench.http_client import Connection, percentile, timed
from owx.bench.results import Report

ACTION = "def main(args):\n    return {'n': args.get('n', 0)}\n"
CONTROLS = ("no-keep-alive",)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="owx bench upstream", description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2000, help="invocations per series")
    parser.add_argument("--block", type=int, default=100, help="calls per block; series alternate by block")
    parser.add_argument("--control", choices=CONTROLS, help="switch a mechanism off (the goal must then fail)")
    args = parser.parse_args(argv)
    report = Report("upstream", {"invocations": args.n, "block": args.block, "action": "returns its input",
                                 "upstream transport": "HTTPS, certificate verified"}, control=args.control)
    auth = f"{uuid.uuid4()}:{secrets.token_hex(24)}"
    env = {"OWX_GATEWAY__INVOCATIONS_PER_MINUTE": "10000000", "OWX_PLATFORM__STEM_CELLS": "0"}
    with tempfile.TemporaryDirectory(prefix="owx-bench-upstream-") as tmp:
        upstream = start_gateway_process(Path(tmp) / "upstream", args=["--no-extensions"], auth=auth, env=env)
        assert upstream.tls_url is not None
        ca = Path(tmp) / "upstream" / "tls" / "ca.pem"  # the CA of the certificate the upstream made itself
        front_env = {**env, "OWX_UPSTREAM__KEEP_ALIVE": str(args.control != "no-keep-alive").lower(),
                     "SSL_CERT_FILE": str(ca)}
        front = start_gateway_process(Path(tmp) / "front", args=["--upstream", upstream.tls_url, "--upstream-auth", auth],
                                      env=front_env)
        try:
            direct, through = _series(Connection(upstream.tls_url, auth, ca), Connection(front.url, front.auth),
                                      args.n, args.block)
        finally:
            front.stop()
            upstream.stop()
    ms = 1000.0
    d50, d99 = percentile(direct, 0.5) * ms, percentile(direct, 0.99) * ms
    t50, t99 = percentile(through, 0.5) * ms, percentile(through, 0.99) * ms
    print(f"{'series':28} {'p50 ms':>8} {'p99 ms':>8}")
    print(f"{'straight to the upstream':28} {d50:8.3f} {d99:8.3f}")
    print(f"{'through owx':28} {t50:8.3f} {t99:8.3f}")
    for name, value in (("direct p50", d50), ("direct p99", d99), ("through owx p50", t50),
                        ("through owx p99", t99), ("added p99", t99 - d99)):
        report.figure(name, round(value, 3), "ms")
    report.goal("owx adds <= 2 ms at p50", round(t50 - d50, 3), 2.0, "ms")
    return report.finish()


def _series(direct_conn: Connection, front_conn: Connection, n: int, block: int) -> tuple[list[float], list[float]]:
    name = f"bench-{uuid.uuid4().hex[:6]}"
    path = f"/api/v1/namespaces/_/actions/{name}"
    for conn in (direct_conn, front_conn):  # the same code deployed straight and through owx
        status, body = conn.put(path + "?overwrite=true", {"exec": {"kind": "python:3", "code": ACTION}})
        if status != 200:
            raise RuntimeError(f"could not create the action: {status} {body[:300]!r}")
    invoke = path + "?blocking=true&result=true"
    for conn in (direct_conn, front_conn):
        timed(lambda i, c=conn: c.post(invoke, {"n": i}), 200)  # warm containers and connections
    direct: list[float] = []
    through: list[float] = []
    while len(direct) < n:
        direct += timed(lambda i: direct_conn.post(invoke, {"n": i}), block)
        through += timed(lambda i: front_conn.post(invoke, {"n": i}), block)
    return direct, through
