"""``owx bench tenants``: what one tenant's flood of the REST API costs another tenant, timed from the other's side.

One gateway (``owx up``, its defaults but the namespaces' invocation limits, raised out of the web
flood's way); wrk sends each flood from its own process while this process
times the victims' requests, first with no flood, then beside it:

- slow views: tenant A GETs a 300 KB action at ``-c64``; tenant B lists its actions every 20 ms;
- web flood: anyone sends A's web action at ``-c128``; B's web action every 20 ms;
- made-up key: ``-c128`` GETs with one made-up ``uuid:key``; tenants made beforehand send their
  first request (new keys), and tenants whose keys have left the 5 s cache send one more
  (returning keys), 0.5 s apart;
- fresh made-up keys: ``-c128`` GETs, each with a made-up key of its own (each one read from the
  store); new tenants send their first request, 0.5 s apart, from another client address
  (``OTHER_ADDRESS``) and from the flood's own, with keys owx made (their MAC tells them from
  made-up ones, :mod:`owx.gateway.key_signing`), and from the flood's own with keys given to owx
  (``owx admin user create --auth``: no MAC, so they wait in the flood's address's turn);
- cold starts: tenant A invokes ``COLD_ACTIONS`` actions of its own at once, each starting a
  container (128 MB: the node's 2 GB holds 16 of them); tenant B's actions are invoked one after
  another meanwhile, each starting a container too;
- large records: tenant A reads its records of 10 MB of logs each at ``-c8``, whole, then only their
  logs (``/logs``: the record parsed); tenant B's warm blocking invokes every 20 ms; the gateway's
  RSS before the reads and after them (what serving them kept);
- many turns (in this process, the gateway's thread pool alone, :class:`FairPool`): another
  tenant's piece of work, from submit to result, with no turn queued and beside ``MANY_TURNS``
  callers' turns (one per address, as callers the store must look up get) queued in a share at
  its cap: what an attacker with that many addresses makes each other request's thread pay.

Figures only, no goal: each victim's p50 and p99 alone and beside its flood, their ratio, and the
flood's rate. ``--control no-thread-cap`` lets one namespace hold every Flask thread
(``OWX_GATEWAY__TENANT_THREAD_SHARE=1``); the victims of the first two series then wait longer.
``--control one-unknown-turn`` makes callers whose key is not known yet share one turn whatever
their address (``OWX_GATEWAY__UNKNOWN_TURN_BY_ADDRESS=false``); new tenants beside the fresh keys
then wait behind the flood wherever they come from. ``--control no-start-turns`` lets a tenant start
as many containers at once as memory allows (``OWX_PLATFORM__STARTS_PER_TENANT=4096``); B's cold
starts then share the cores with all of A's.
"""

from __future__ import annotations

import argparse
import secrets
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

import requests

from owx.bench.gateway_process import GatewayProcess, start_gateway_process
from owx.bench.http_client import from_address, percentile
from owx.bench.invoke.fairness import new_tenant
from owx.bench.results import Report
from owx.bench.wrk import WrkResult, wrk
from owx.gateway.http.fair_pool import FairPool

Measured = TypeVar("Measured")
CONTROLS = {"no-thread-cap": {"OWX_GATEWAY__TENANT_THREAD_SHARE": "1"},
            "one-unknown-turn": {"OWX_GATEWAY__UNKNOWN_TURN_BY_ADDRESS": "false"},
            "no-start-turns": {"OWX_PLATFORM__STARTS_PER_TENANT": "4096"}}
UNTHROTTLED = {"OWX_GATEWAY__INVOCATIONS_PER_MINUTE": "100000000", "OWX_GATEWAY__CONCURRENT_INVOCATIONS": "100000"}
CACHE_LIFE_S = 5.5  # past the gateway's key cache (owx.gateway.identity.CACHE_TTL_S)
TICK_S = 0.02  # between a victim's requests in the first two series
KEY_GAP_S = 0.5  # between the first requests of new (or returning) tenants
FRESH_KEYS = 100_000  # made-up keys of the fresh-keys flood (more than it sends: none is sent twice)
COLD_ACTIONS = 40  # tenant A's actions invoked at once in the cold-start series
MANY_TURNS = 20_000  # callers' turns queued in one share at its cap (many turns)
POOL_THREADS, POOL_SHARE = 8, 4  # the pool of the many-turns figure: its threads, a share's cap
COLD_CODE = "def main(args):\n    return {'n': args.get('n', 0)}\n"
OTHER_ADDRESS = "127.0.0.2"  # a client address other than the floods' (all of 127/8 is this machine)
BIG_ACTION = "def main(args):\n    return {}\n# " + "x" * 300_000 + "\n"
WEB_ACTION = "def main(args):\n    return {'ok': 1}\n"
WEB = [{"key": "web-export", "value": True}]
PRINTER_ACTION = "def main(args):\n    line = 'x' * 8192\n    for _ in range(1250):\n        print(line)\n    return {}\n"
RECORD_READERS = 8  # connections reading tenant A's large records


@dataclass
class Series:
    """One victim's requests alone and beside one flood."""

    name: str
    alone_ms: list[float]
    flooded_ms: list[float]
    flood: WrkResult

    def report(self, report: Report) -> None:
        for when, samples in (("alone", self.alone_ms), ("beside the flood", self.flooded_ms)):
            report.figure(f"{self.name}: victim p50 / p99 {when}",
                          f"{percentile(samples, 0.5):.1f} / {percentile(samples, 0.99):.1f}", "ms")
        report.figure(f"{self.name}: victim p50 beside the flood / alone",
                      round(percentile(self.flooded_ms, 0.5) / percentile(self.alone_ms, 0.5), 1), "x")
        report.figure(f"{self.name}: the flood (its non-2xx answers)", f"{self.flood.rate:.0f} req/s "
                      f"({self.flood.non_2xx})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="owx bench tenants", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="duration of each flood")
    parser.add_argument("--control", choices=sorted(CONTROLS), help="switch a mechanism off")
    args = parser.parse_args(argv)
    report = Report("tenants", {"flood seconds": args.seconds, "slow views": "wrk -c64 GET of a 300 KB action",
                                "web flood": "wrk -c128", "made-up key flood": "wrk -c128",
                                "fresh made-up keys flood": "wrk -c128, a new key per request",
                                "cold-start flood": f"{COLD_ACTIONS} actions of 128 MB invoked at once",
                                "large records": f"wrk -c{RECORD_READERS} GET of records of 10 MB",
                                "victim request every (ms)": TICK_S * 1000, "namespace limits": "raised"},
                    control=args.control)
    with tempfile.TemporaryDirectory(prefix="owx-bench-tenants-") as tmp:
        gateway = start_gateway_process(Path(tmp) / "gw", env={**UNTHROTTLED, **CONTROLS.get(args.control or "", {})})
        try:
            for series in (*_view_floods(gateway, args.seconds), *_made_up_key(gateway, args.seconds),
                           *_fresh_made_up_keys(gateway, args.seconds), _cold_starts(gateway)):
                series.report(report)
            rss_before = gateway.rss_mb()
            for series in _large_records(gateway, args.seconds):
                series.report(report)
            report.figure("large records: gateway RSS before / after the reads",
                          f"{rss_before:.0f} / {gateway.rss_mb():.0f}", "MB")
        finally:
            gateway.stop()
    alone_us, beside_us = _pool_turns(0), _pool_turns(MANY_TURNS)
    report.figure(f"many turns: another tenant's work p50 alone / beside {MANY_TURNS} capped turns",
                  f"{alone_us:.0f} / {beside_us:.0f}", "us")
    report.figure("many turns: another tenant's work p50 beside them / alone", round(beside_us / alone_us, 1), "x")
    return report.finish()


def _view_floods(gateway: GatewayProcess, seconds: float) -> list[Series]:
    a = gateway.session()
    b = gateway.session(new_tenant(gateway, "bench-victim"))
    for session in (a, b):
        code = {"exec": {"kind": "python:3", "code": WEB_ACTION}, "annotations": WEB}
        session.put(f"{gateway.url}/api/v1/namespaces/_/actions/web?overwrite=true", json=code).raise_for_status()
    a.put(gateway.api("actions/big?overwrite=true"),
          json={"exec": {"kind": "python:3", "code": BIG_ACTION}}).raise_for_status()
    listing = f"{gateway.url}/api/v1/namespaces/_/actions"
    web_a, web_b = (f"{gateway.url}/api/v1/web/{_namespace(s, gateway)}/default/web.json" for s in (a, b))
    anyone = requests.Session()
    for url in (web_a, web_b):
        anyone.get(url).raise_for_status()  # warm containers, owners cached

    victim_lists = partial(_ticking, lambda: b.get(listing))
    victim_web = partial(_ticking, lambda: anyone.get(web_b))
    return [
        _beside("slow views", victim_lists, seconds,
                lambda: wrk(gateway.api("actions/big"), connections=64, seconds=seconds, auth=gateway.auth)),
        _beside("web flood", victim_web, seconds, lambda: wrk(web_a, connections=128, seconds=seconds)),
    ]


def _made_up_key(gateway: GatewayProcess, seconds: float) -> list[Series]:
    listing = f"{gateway.url}/api/v1/namespaces/_/actions"
    sessions = [gateway.session(new_tenant(gateway, f"bench-key-{number}")) for number in range(20)]
    new_alone, new_flooded = sessions[:4], sessions[4:10]
    returning_alone, returning_flooded = sessions[10:14], sessions[14:]
    for session in (*returning_alone, *returning_flooded):
        for _ in range(2):  # the first reads the key from the store, the second is checked against the cache
            session.get(listing).raise_for_status()
    new_quiet = _each(new_alone, listing)
    time.sleep(CACHE_LIFE_S)
    returning_quiet = _each(returning_alone, listing)
    made_up = f"{uuid.uuid4()}:{'x' * 64}"
    (returning, new), flood = _while_flooding(
        lambda: wrk(listing, connections=128, seconds=seconds, auth=made_up), 1.0,
        lambda: (_each(returning_flooded, listing), _each(new_flooded, listing)))
    return [Series("made-up key, new keys' first request", new_quiet, new, flood),
            Series("made-up key, returning keys past the cache", returning_quiet, returning, flood)]


def _fresh_made_up_keys(gateway: GatewayProcess, seconds: float) -> list[Series]:
    listing = f"{gateway.url}/api/v1/namespaces/_/actions"
    keys = [new_tenant(gateway, f"bench-fresh-{number}") for number in range(16)]
    given = [new_tenant(gateway, f"bench-given-{number}", f"{uuid.uuid4()}:{secrets.token_hex(32)}")
             for number in range(8)]
    victims = [[from_address(gateway.session(key), OTHER_ADDRESS) for key in keys[:8]],
               [gateway.session(key) for key in keys[8:]], [gateway.session(key) for key in given]]
    quiet = [_each(sessions[:3], listing) for sessions in victims]
    made_up = [f"{uuid.uuid4()}:{'x' * 64}" for _ in range(FRESH_KEYS)]
    flooded, flood = _while_flooding(
        lambda: wrk(listing, connections=128, seconds=seconds, rotating_auths=made_up), 1.0,
        lambda: [_each(sessions[3:], listing) for sessions in victims])
    names = ("new keys from another address", "new keys from the flood's address",
             "new keys given to owx, from the flood's address")
    return [Series(f"fresh made-up keys, {name}", alone, beside, flood)
            for name, alone, beside in zip(names, quiet, flooded)]


def _cold_starts(gateway: GatewayProcess) -> Series:
    a, b = gateway.session(), gateway.session(new_tenant(gateway, "bench-cold-victim"))
    floods, victims = _actions(a, gateway, "cold-a", COLD_ACTIONS), _actions(b, gateway, "cold-b", 10)
    alone = [_timed(partial(_cold_invoke, b, action)) for action in victims[:4]]
    with ThreadPoolExecutor(COLD_ACTIONS) as senders:
        started = time.perf_counter()
        sent = [senders.submit(_timed_answer, partial(_cold_invoke, gateway.session(), action)) for action in floods]
        time.sleep(0.05)
        flooded = []
        for action in victims[4:]:
            flooded.append(_timed(partial(_cold_invoke, b, action)))
            if all(future.done() for future in sent):
                break
        answers = [future.result() for future in sent]
    span_s = time.perf_counter() - started
    times = [elapsed for elapsed, _ in answers]
    flood = WrkResult(len(answers), span_s, len(answers) / span_s, sum(1 for _, answer in answers if not answer.ok),
                      0, percentile(times, 0.5), percentile(times, 0.99))
    return Series("cold starts beside another tenant's", alone, flooded, flood)


def _pool_turns(queued: int, samples: int = 51) -> float:
    """p50 microseconds from submit to result of another tenant's piece of work in a `FairPool` whose
    one share holds its cap of threads and ``queued`` more tenants' turns."""
    pool = FairPool(POOL_THREADS, "bench-turns", POOL_SHARE, share_of=lambda tenant: "" if tenant[0] == "a" else tenant)
    release = threading.Event()
    try:
        for number in range(POOL_SHARE):
            pool.submit_as(f"a-holder-{number}", release.wait)
        for number in range(queued):
            pool.submit_as(f"a{number}", time.sleep, 0)
        time.sleep(0.2)  # the holders hold their threads; the rest wait for the share's cap
        waits = []
        for number in range(samples):
            started = time.perf_counter()
            pool.submit_as(f"other-{number}", lambda: None).result(10)
            waits.append((time.perf_counter() - started) * 1e6)
        return percentile(waits, 0.5)
    finally:
        release.set()
        pool.shutdown(cancel_futures=True)


def _actions(session: requests.Session, gateway: GatewayProcess, prefix: str, count: int) -> list[str]:
    """``count`` new actions of 128 MB (each invoke of one the first: a container of its own)."""
    urls = [gateway.api(f"actions/{prefix}-{number}") for number in range(count)]
    for url in urls:
        session.put(f"{url}?overwrite=true", json={"exec": {"kind": "python:3", "code": COLD_CODE},
                                                    "limits": {"memory": 128}}).raise_for_status()
    return urls


def _cold_invoke(session: requests.Session, action: str) -> requests.Response:
    return session.post(f"{action}?blocking=true&result=true", json={})


def _large_records(gateway: GatewayProcess, seconds: float) -> list[Series]:
    a, b = gateway.session(), gateway.session(new_tenant(gateway, "bench-records-victim"))
    printer = {"exec": {"kind": "python:3", "code": PRINTER_ACTION}, "limits": {"logs": 10}}
    a.put(gateway.api("actions/printer?overwrite=true"), json=printer).raise_for_status()
    b.put(gateway.api("actions/quick?overwrite=true"), json={"exec": {"kind": "python:3", "code": COLD_CODE}}
          ).raise_for_status()
    record = a.post(gateway.api("actions/printer"), params={"blocking": "true"}).json()["activationId"]
    invoke = partial(b.post, gateway.api("actions/quick"), params={"blocking": "true"})
    invoke().raise_for_status()  # warm
    return [_beside(f"large records{path}", partial(_ticking, invoke), seconds,
                    lambda path=path: wrk(gateway.api(f"activations/{record}{path}"), connections=RECORD_READERS,
                                          seconds=seconds, auth=gateway.auth))
            for path in ("", "/logs")]


def _beside(name: str, victim: Callable[[float], list[float]], seconds: float,
            flood: Callable[[], WrkResult]) -> Series:
    """The victim alone for 3 s, then from 1.5 s into the flood until 1.5 s before its end."""
    alone = victim(3.0)
    flooded, sent = _while_flooding(flood, 1.5, lambda: victim(max(1.0, seconds - 3.0)))
    return Series(name, alone, flooded, sent)


def _while_flooding(flood: Callable[[], WrkResult], lead_s: float,
                    measure: Callable[[], Measured]) -> tuple[Measured, WrkResult]:
    """``measure()`` from ``lead_s`` into ``flood()`` (sent from a thread meanwhile); both results."""
    sent: dict[str, WrkResult] = {}
    sender = threading.Thread(target=lambda: sent.update(flood=flood()))
    sender.start()
    time.sleep(lead_s)
    measured = measure()
    sender.join()
    return measured, sent["flood"]


def _ticking(call: Callable[[], requests.Response], span_s: float) -> list[float]:
    """Milliseconds of each ``call``, TICK_S apart, for ``span_s``; every answer must be 2xx."""
    samples: list[float] = []
    deadline = time.monotonic() + span_s
    while time.monotonic() < deadline:
        samples.append(_timed(call))
        time.sleep(TICK_S)
    return samples


def _each(sessions: list[requests.Session], url: str) -> list[float]:
    """Milliseconds of one GET of ``url`` by each session, KEY_GAP_S apart; every answer must be 2xx."""
    samples = []
    for session in sessions:
        samples.append(_timed(partial(session.get, url)))
        time.sleep(KEY_GAP_S)
    return samples


def _timed(call: Callable[[], requests.Response]) -> float:
    """Milliseconds of ``call``, which must answer 2xx."""
    elapsed_ms, answer = _timed_answer(call)
    answer.raise_for_status()
    return elapsed_ms


def _timed_answer(call: Callable[[], requests.Response]) -> tuple[float, requests.Response]:
    started = time.perf_counter()
    answer = call()
    return (time.perf_counter() - started) * 1000, answer


def _namespace(session: requests.Session, gateway: GatewayProcess) -> str:
    return session.get(f"{gateway.url}/api/v1/namespaces/_/actions/web").json()["namespace"]


if __name__ == "__main__":
    raise SystemExit(main())
