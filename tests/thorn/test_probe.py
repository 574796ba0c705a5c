"""The measuring roles on a real namespace: the round-trip probe and the long-running pair."""

from __future__ import annotations

import time

from owx.thorn import measure, netns
from owx.thorn.probe import GapTrace, outage_ms


def stop(*roles: measure.RoleProcess) -> None:
    for role in roles:
        if role.alive():
            role.finish()


def test_a_flow_that_never_answers_again_counts_to_the_end_of_the_window(prefix):
    ns = f"{prefix}p"
    netns.create(ns)
    echo = measure.probe(ns, "echo", "127.0.0.1:9400")
    time.sleep(0.3)
    client = measure.probe(ns, "rt-client", "127.0.0.1:9400", "--flows", "4", "--interval-ms", "5")
    try:
        time.sleep(0.7)
        stopping = time.monotonic()
        served = echo.finish()  # the path dies, somewhere in [stopping, died], and never comes back
        died = time.monotonic()
        time.sleep(0.8)
        end = time.monotonic()
        report = client.finish()
    finally:
        stop(client, echo)
    assert len(report["flows"]) == 4 and len({f["port"] for f in report["flows"]}) == 4
    assert len(served["flows"]) == 4  # four 5-tuples reached the server
    for flow in report["flows"]:
        assert flow["received"] > 50
        outage = outage_ms(flow["gaps"], died, end)
        # counted to the end of the window: at least from `died`, at most from just before `stopping`
        assert (end - died) * 1000 - 50 <= outage <= (end - stopping) * 1000 + 50, outage


def test_gaps_are_cut_at_the_window_and_short_ones_ignored():
    trace = GapTrace(started=0.0, min_ms=3.0)
    for t in (0.001, 0.002, 0.003, 0.100, 0.101):  # one 97 ms gap
        trace.arrived(t)
    gaps = trace.close(now=2.0)  # and silence from 0.101 on
    assert [round(ms) for _, ms in gaps] == [97, 1899]
    assert round(outage_ms(gaps, 0.05, 0.1)) == 97
    assert round(outage_ms(gaps, 0.05, 0.09)) == 87  # cut at the window's end
    assert round(outage_ms(gaps, 0.5, 1.0)) == 899  # the open gap, cut at the window's end
    assert outage_ms(gaps, 0.0005, 0.0009) == 0.0


def test_the_pair_reconnects_over_its_next_path_when_one_goes_silent(prefix):
    ns = f"{prefix}p"
    netns.create(ns)
    netns.run(ns, ["ip", "addr", "add", "127.0.0.2/8", "dev", "lo"], check=False)
    server = measure.pair(ns, "server", "0.0.0.0:9401")
    time.sleep(0.3)
    client = measure.pair(ns, "client", "127.0.0.1:9401,127.0.0.1", "127.0.0.2:9401,127.0.0.2",
                          "--interval-ms", "10", "--size", "4096", "--detect-s", "0.5")
    try:
        time.sleep(1.0)
        cut = time.monotonic()
        rules = ("table inet thn_pair {\n chain out {\n  type filter hook output priority 0;\n"
                 "  ip daddr 127.0.0.1 drop\n }\n}\n")
        netns.run(ns, ["nft", "-f", "-"], input=rules)  # path 0 drops everything from now on
        time.sleep(1.5)
        report = client.finish()
        conns = server.finish()
    finally:
        stop(client, server)
    assert [index for _, index in report["failures"]] == [0]
    assert conns["connections"] == 2
    resumed = outage_ms(report["gaps"], cut, cut + 1.5)
    assert 500 <= resumed < 1000  # the heartbeat timeout, then a reconnect
    assert report["exchanges"] > 100
