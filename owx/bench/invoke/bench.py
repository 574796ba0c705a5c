"""``owx bench invoke``: warm invocations through ``owx up`` against the web stack's own floor.

Everything runs in this run, on this machine, each server in a process of its own, and every
figure comes from wrk (another process, the client's clock):

- anchors: a Flask "hello" POST on waitress, on granian (WSGI) and on the server owx uses
  (its own, with its bridge to Flask), at 1, 4 and 64 connections; the same hello without Flask on
  owx's server and on uvicorn, at 1 and 4 (what owx's server saves); a warm action runtime answering
  ``/run`` directly; the c1 floor: the hello on granian plus a direct ``/run``, at p50, over
  the direct ``/run`` (a gateway on Flask serves one such request and makes one such call per
  invocation, so its c1 ratio cannot go much below this; printed beside the goal, not a goal);
  and the same floor without Flask (the hello on owx's server instead, as owx serves an invoke);
  owx's own forward at 1 connection (owx's server, its busy poll and its runtime client on a Unix
  socket, nothing else): its p50 over the direct ``/run``'s is the floor of owx's own parts, and the
  gateway's c1 p50 minus the forward's is what owx's pipeline adds (figures, not goals);
  the direct ``/run`` again with wrk and the runtime pinned to one core, and to two (what waking a
  process on another core costs this machine: both c1 series it measures wake another core twice
  per request, whatever the scheduler does; a figure, not a goal);
  and the c4 ceiling: a Flask app on granian that only forwards each invocation to that runtime's
  ``/run``, over the hello (what the c4 goal's 0.35 leaves room for; a figure, not a goal), with
  its CPU per 1,000 forwards beside the CPU per 1,000 invocations at which the c4 goal's rate would
  take every core of the machine (owx's own figure must be below that, however it is served);
- ``owx up`` (embedded platform, extensions on): warm blocking invokes at 1, 4 and 64 connections
  (every one must answer 2xx and be recorded: counted through the API), non-blocking invokes
  (202), activation GETs, the gateway's RSS and CPU seconds per 1,000 invocations, and during the
  c4 series the cores its event-loop thread and its other threads used beside the machine's idle
  ones (its threads share one interpreter lock), and the c4 rate of two such gateways sharing
  nothing, 2 connections each at once, beside one gateway's in the same minute
  (:mod:`owx.bench.invoke.shared_nothing`: what more processes alone could give);
- a flood (:mod:`owx.bench.invoke.flood`): ``--flood`` non-blocking invokes as fast as wrk -c16
  sends them, namespace limits out of the way, while another client times GETs.

Goals: warm blocking invokes/s at 4 connections >= 0.35x Flask-on-granian's hello; gateway p50 at
1 connection <= 2x a direct ``/run``'s (measured with the anchors and again right after owx's c1
series: the mean of the two); during the flood GETs keep p99 < 100 ms, threads stay
bounded and every accepted activation is recorded; another tenant's p99 while 200 blocking invokes
wait (:mod:`owx.bench.invoke.fairness`) < 100 ms. Controls (``--control``): ``threaded-runs``
(every activation runs and waits on a worker thread, up to 4,096 of them, as before owx ran warm
activations from its event loop: throughput and the flood's thread bound must fail), ``held-waits``
(waiting requests hold server threads, and a namespace may hold them all, as on a plain WSGI
server: the fairness goal must fail), ``no-busy-poll`` (the gateway's
loop sleeps whenever it waits, however soon the answer is due: what busy polling saves at c1),
``default-gc`` (Python's collector as it comes: its full collections stall the loop during the
flood, whose GET p99 must then fail).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

from owx.bench.gateway_process import GatewayProcess, start_gateway_process
from owx.bench.invoke.anchors import (ACTION, NATIVE_SERVERS, SERVERS, forward_server, free_port, hello_server,
                                      owx_forward_server, run_payload)
from owx.bench.invoke.coldstart import measure_cold_start
from owx.bench.invoke.fairness import measure_fairness
from owx.bench.invoke.flood import flood, settled_count
from owx.bench.invoke.shared_nothing import shared_nothing
from owx.bench.results import Report
from owx.bench.wrk import WrkResult, wrk
from owx.gateway.settings import GatewaySettings

LOOP_THREAD = "owx-loop"  # the gateway's event loop, named so in the kernel (owx.common.eventloop)
CONTROLS = {"threaded-runs": {"OWX_GATEWAY__LOOP_RUNS": "false", "OWX_GATEWAY__WORKERS": "4096"},
            "held-waits": {"OWX_GATEWAY__DEFER_WAITS": "false", "OWX_GATEWAY__TENANT_THREAD_SHARE": "1"},
            "no-busy-poll": {"OWX_GATEWAY__BUSY_POLL_US": "0"},
            "default-gc": {"OWX_GATEWAY__SHORT_GC_PAUSES": "false"}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="owx bench invoke", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="duration of each wrk series")
    parser.add_argument("--flood", type=int, default=10_000, help="non-blocking invokes in the flood")
    parser.add_argument("--cold", type=int, default=20, help="cold starts of the embedded platform")
    parser.add_argument("--blocked", type=int, default=200, help="tenant A's waiting blocking invokes (fairness)")
    parser.add_argument("--control", choices=sorted(CONTROLS), help="switch a mechanism off (a goal must then fail)")
    args = parser.parse_args(argv)
    report = Report("invoke", {"seconds": args.seconds, "flood": args.flood, "action": "returns {'n': n}",
                               "wrk threads": 2, "blocked": args.blocked, "blocked action sleeps": "2 s",
                               "gateway busy poll at least (us)": _busy_poll_us(args.control)},
                    control=args.control)
    body = '{"n": 1}'

    hello: dict[tuple[str, int], WrkResult] = {}
    for kind in SERVERS:
        with hello_server(kind) as url:
            for connections in (1, 4, 64):
                hello[kind, connections] = wrk(url, connections=connections, seconds=args.seconds, method="POST",
                                               body=body)
                report.figure(f"Flask hello on {kind}, c{connections}", round(hello[kind, connections].rate), "req/s")
            report.figure(f"Flask hello on {kind}, c1, p50", hello[kind, 1].p50_ms, "ms")
    native: dict[tuple[str, int], WrkResult] = {}
    for kind in NATIVE_SERVERS:
        with hello_server(kind) as url:
            for connections in (1, 4):
                native[kind, connections] = wrk(url, connections=connections, seconds=args.seconds, method="POST",
                                                body=body)
            report.figure(f"hello without Flask on {kind}, c1, p50", native[kind, 1].p50_ms, "ms")
            report.figure(f"hello without Flask on {kind}, c4", round(native[kind, 4].rate), "req/s")
    report.figure("hello without Flask, c1 p50: owx's server / uvicorn",
                  round(native["owx-native", 1].p50_ms / native["uvicorn-native", 1].p50_ms, 2), "x")
    with _direct_runtime() as run_url:
        direct = wrk(run_url, connections=1, seconds=args.seconds, method="POST", body=_run_body())
        with forward_server(run_url) as (forward_url, forward_pid):
            cpu_before = _cpu_seconds(forward_pid, children=True)
            forwarded = wrk(forward_url, connections=4, seconds=args.seconds, method="POST", body=body)
            forward_cpu_per_1000 = (_cpu_seconds(forward_pid, children=True) - cpu_before) / forwarded.requests * 1000
    if forwarded.non_2xx or forwarded.errors:
        raise RuntimeError(f"the forward anchor failed: {forwarded.non_2xx} non-2xx answers, {forwarded.errors} errors")
    report.figure("direct /run, c1, p50", direct.p50_ms, "ms")
    if len(os.sched_getaffinity(0)) >= 2:
        one, two = (_direct_placed(args.seconds, cores) for cores in ((0, 0), (0, 1)))
        report.figure("direct /run, c1, p50: wrk and the runtime on one core / on two", f"{one:.3f} / {two:.3f}", "ms")
    with owx_forward_server() as owx_forward_url:
        owx_forward = wrk(owx_forward_url, connections=1, seconds=args.seconds, method="POST", body=body)
    report.figure("owx's forward (owx's server, busy poll, runtime on a Unix socket), c1, p50", owx_forward.p50_ms, "ms")
    report.figure("c1 floor of owx's own parts: owx's forward p50 / direct /run p50",
                  round(owx_forward.p50_ms / direct.p50_ms, 2), "x")
    report.figure("Flask forward to /run on granian, c4", round(forwarded.rate), "req/s")
    # what a gateway on Flask can serve at c4 with nothing but the one /run call per invocation
    report.figure("c4 ceiling: Flask forward on granian c4 / Flask hello on granian c4",
                  round(forwarded.rate / hello["granian", 4].rate, 3), "x")
    report.figure("Flask forward on granian: CPU per 1,000 forwards", round(forward_cpu_per_1000, 3), "s")
    # the c4 goal's rate times a gateway's CPU per invocation cannot exceed the machine's cores,
    # however many processes the gateway used (wrk and the runtime take their share too)
    report.figure("CPU per 1,000 invocations at which the c4 goal's rate takes every core",
                  round(os.cpu_count() / (0.35 * hello["granian", 4].rate) * 1000, 3), "s")
    # what a gateway on Flask pays at c1 before any work of its own: one Flask request (on the
    # fastest anchor) and one /run
    report.figure("c1 floor: (Flask hello on granian p50 + direct /run p50) / direct /run p50",
                  round((hello["granian", 1].p50_ms + direct.p50_ms) / direct.p50_ms, 2), "x")
    # the same without Flask, as owx serves an invoke: one request on owx's server and one /run
    report.figure("c1 floor without Flask: (hello on owx's server p50 + direct /run p50) / direct /run p50",
                  round((native["owx-native", 1].p50_ms + direct.p50_ms) / direct.p50_ms, 2), "x")

    env = {"OWX_GATEWAY__INVOCATIONS_PER_MINUTE": "100000000", "OWX_GATEWAY__CONCURRENT_INVOCATIONS": "100000",
           "OWX_PLATFORM__STEM_CELLS": "0", **CONTROLS.get(args.control or "", {})}
    with tempfile.TemporaryDirectory(prefix="owx-bench-invoke-") as tmp:
        gateway = start_gateway_process(Path(tmp) / "gw", env=env)
        try:
            invoke = _deploy(gateway)
            blocking = f"{invoke}?blocking=true&result=true"
            wrk(blocking, connections=4, seconds=2, method="POST", body=body, auth=gateway.auth)  # warm up
            invoked = settled_count(gateway)
            cpu_before = _cpu_seconds(gateway.process.pid)
            series: dict[int, WrkResult] = {}
            cores: dict[int, tuple[float, ...]] = {}
            poll_budget_us: int | None = None
            direct_after: WrkResult | None = None
            for connections in (1, 4, 64):
                before = _core_ticks(gateway.process.pid)
                series[connections] = wrk(blocking, connections=connections, seconds=args.seconds, method="POST",
                                          body=body, auth=gateway.auth)
                cores[connections] = _cores_since(before, _core_ticks(gateway.process.pid))
                if connections == 1:
                    poll_budget_us = _busy_poll_budget_us(gateway)
                    with _direct_runtime() as run_url:  # the anchor again, in the same minute
                        direct_after = wrk(run_url, connections=1, seconds=args.seconds, method="POST",
                                           body=_run_body())
            sent = sum(r.requests for r in series.values())
            cpu_per_1000 = (_cpu_seconds(gateway.process.pid) - cpu_before) / sent * 1000
            recorded = settled_count(gateway)
            nonblocking = wrk(invoke, connections=4, seconds=args.seconds, method="POST", body=body, auth=gateway.auth)
            last = gateway.session().get(gateway.api("activations"), params={"limit": 1}).json()[0]["activationId"]
            gets = wrk(gateway.api(f"activations/{last}"), connections=4, seconds=args.seconds, auth=gateway.auth)
            rss_mb = gateway.rss_mb()
            split = shared_nothing(gateway, invoke, Path(tmp) / "gw2", env, _deploy, args.seconds, body)
            flooded = flood(gateway, invoke, args.flood)
            fair = measure_fairness(gateway, args.blocked)
        finally:
            gateway.stop()
    colds = sorted(measure_cold_start("embedded", args.cold)) if args.cold else []

    for connections, result in series.items():
        report.figure(f"owx blocking invokes, c{connections}", round(result.rate), "req/s")
        report.figure(f"owx blocking invokes, c{connections}, p50", result.p50_ms, "ms")
        report.figure(f"owx blocking invokes, c{connections}, p99", result.p99_ms, "ms")
    if poll_budget_us is not None:
        report.figure("gateway busy poll budget after the c1 series (tuned)", poll_budget_us, "us")
    report.figure("owx non-2xx answers (all series)", sum(r.non_2xx + r.errors for r in series.values()))
    answered = sent - sum(r.non_2xx for r in series.values())
    report.figure("owx blocking invocations answered 2xx / recorded", f"{answered} / {recorded - invoked}")
    report.figure("owx records beyond the 2xx answers (invokes wrk cut off, or answered in error)",
                  recorded - invoked - answered)
    report.figure("owx non-blocking invokes (202), c4", round(nonblocking.rate), "req/s")
    report.figure("owx activation GETs, c4", round(gets.rate), "req/s")
    report.figure("gateway CPU per 1,000 invocations", round(cpu_per_1000, 3), "s")
    # the gateway's threads share one interpreter lock: a gateway near one core beside idle cores
    # is bounded by that lock, not by the machine
    for name, cores in zip(("gateway's event-loop thread", "gateway's other threads", "machine idle"), cores[4]):
        report.figure(f"during the c4 series: {name}", round(cores, 2), "cores")
    report.figure("gateway RSS after the series", round(rss_mb, 1), "MB")
    report.figure("one owx gateway c4, right before two sharing nothing", round(split.alone.rate), "req/s")
    report.figure("two owx gateways sharing nothing, c2 each at once",
                  " + ".join(str(round(r.rate)) for r in split.together), "req/s")
    report.figure("two owx gateways sharing nothing: non-2xx answers",
                  sum(r.non_2xx + r.errors for r in (split.alone, *split.together)))
    report.figure("two gateways sharing nothing / one gateway, c4", round(split.speedup, 2), "x")
    report.figure("c4 over two gateways sharing nothing / Flask hello on granian c4",
                  round(sum(r.rate for r in split.together) / hello["granian", 4].rate, 3), "x")
    for name, value, unit in flooded.figures():
        report.figure(name, value, unit)
    if colds:
        report.figure("embedded cold start p50", round(colds[len(colds) // 2] * 1000, 1), "ms")

    report.goal("warm blocking invokes/s (c4) / Flask-on-granian hello (c4) >= 0.35",
                round(series[4].rate / hello["granian", 4].rate, 3), 0.35, higher_is_better=True)
    # the direct /run measured before the gateways' series and right after owx's c1 series: a machine
    # whose speed drifts over the run's minutes moves both
    assert direct_after is not None
    report.figure("direct /run, c1, p50, right after owx's c1 series", direct_after.p50_ms, "ms")
    direct_p50 = (direct.p50_ms + direct_after.p50_ms) / 2
    # what the pipeline adds to a warm invoke at c1, beyond owx's server and runtime client
    report.figure("owx's pipeline at c1: (gateway p50 - owx's forward p50) / direct /run p50",
                  round((series[1].p50_ms - owx_forward.p50_ms) / direct_p50, 2), "x")
    report.goal("gateway p50 / direct /run p50 (c1, the mean of its two series) <= 2",
                round(series[1].p50_ms / direct_p50, 2), 2.0)
    report.goal("non-2xx answers + 2xx answers not recorded == 0",
                sum(r.non_2xx + r.errors for r in series.values()) + max(0, answered - (recorded - invoked)), 0)
    flooded.goals(report)
    fair.report(report)
    return report.finish()


def _busy_poll_budget_us(gateway: GatewayProcess) -> int | None:
    """The busy poll's budget the gateway tuned itself to (its ``/metrics``); None without a busy poll."""
    text = requests.get(f"{gateway.url}/metrics", timeout=10).text
    found = re.search(r"^owx_busy_poll_budget_seconds ([0-9.e+-]+)$", text, re.MULTILINE)
    return round(float(found.group(1)) * 1e6) if found else None


def _busy_poll_us(control: str | None) -> int:
    """The gateway's busy poll in this run (``gateway.busy_poll_us``, unless the control sets it)."""
    return int(CONTROLS.get(control or "", {}).get("OWX_GATEWAY__BUSY_POLL_US", GatewaySettings().busy_poll_us))


def _deploy(gateway: GatewayProcess) -> str:
    http = gateway.session()
    answer = http.put(gateway.api("actions/bench?overwrite=true"), json={"exec": {"kind": "python:3", "code": ACTION}})
    if not answer.ok:
        raise RuntimeError(f"could not create the action: {answer.text}")
    return gateway.api("actions/bench")


def _cpu_seconds(pid: int, children: bool = False) -> float:
    """CPU seconds (user + system) of process ``pid`` so far, with its living descendants' if ``children``."""
    processes = [d.name for d in Path("/proc").iterdir() if d.name.isdigit()] if children else [str(pid)]
    stats = {name: _stat(name) for name in processes}
    tree, total = [str(pid)], 0.0
    while tree:
        parent = tree.pop()
        fields = stats[parent]
        total += _cpu_ticks(fields) / 100  # clock ticks of 1/100 s
        tree.extend(child for child, f in stats.items() if f and f[1] == parent)
    return total


def _core_ticks(pid: int) -> tuple[float, int, int, int]:
    """(now, CPU ticks of the event-loop thread of ``pid``, of all its threads, the machine's idle ticks)."""
    loop = next((task.name for task in Path(f"/proc/{pid}/task").iterdir()
                 if (task / "comm").read_text().strip() == LOOP_THREAD), str(pid))
    main, whole = _stat(f"{pid}/task/{loop}"), _stat(str(pid))
    idle = int(Path("/proc/stat").read_text().split(maxsplit=5)[4])  # "cpu user nice system idle ..."
    return time.monotonic(), _cpu_ticks(main), _cpu_ticks(whole), idle


def _cores_since(before: tuple[float, int, int, int], after: tuple[float, int, int, int]) -> tuple[float, ...]:
    """Cores used in between by the main thread, by the other threads, and left idle on the machine."""
    seconds = after[0] - before[0]
    main, whole, idle = ((a - b) / 100 / seconds for a, b in zip(after[1:], before[1:]))  # ticks of 1/100 s
    return main, whole - main, idle


def _cpu_ticks(stat: list[str]) -> int:
    """utime + stime of `_stat`'s fields, in clock ticks."""
    return int(stat[11]) + int(stat[12])


def _stat(pid: str) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command name (state first, then ppid); [] if it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return []


def _run_body() -> str:
    return json.dumps(run_payload({"n": 1}))


def _direct_placed(seconds: float, cores: tuple[int, int]) -> float:
    """The direct ``/run``'s c1 p50 (ms) with the runtime on core ``cores[0]`` and wrk on ``cores[1]``."""
    cpus = sorted(os.sched_getaffinity(0))
    runtime_core, client_core = (cpus[index] for index in cores)
    with _on_core(runtime_core), _direct_runtime() as run_url, _on_core(client_core):
        return wrk(run_url, connections=1, seconds=seconds, method="POST", body=_run_body()).p50_ms


@contextmanager
def _on_core(core: int) -> Iterator[None]:
    """This process, and the processes it starts meanwhile, on ``core`` only."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


@contextmanager
def _direct_runtime() -> Iterator[str]:
    """A warm runtime process of the same action, answering ``/run`` on TCP; yields the /run URL."""
    port = free_port()
    runtime = subprocess.Popen([sys.executable, "-m", "owx.runtimes.python_action", "--host", "127.0.0.1",
                                "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                answer = requests.post(f"http://127.0.0.1:{port}/init",
                                       json={"value": {"name": "bench", "main": "main", "code": ACTION}}, timeout=2)
                break
            except requests.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        if not answer.ok:
            raise RuntimeError(f"/init answered {answer.status_code}: {answer.text}")
        yield f"http://127.0.0.1:{port}/run"
    finally:
        runtime.kill()
        runtime.wait()
