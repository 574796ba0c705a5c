"""A round-trip probe over many flows: what an application on the overlay sees during a fault.

``rt-client`` keeps ``flows`` UDP flows (one socket, so one source port, each) in
request/response with an ``echo`` server; each flow sends one request every
``interval_ms``. The client timestamps every response on its own clock and keeps,
per flow, the gaps between consecutive responses: a gap is a round-trip outage of
that flow. A flow that stops answering is closed with a gap running to the moment
the client stops, so a path that never comes back counts as an outage to the end.
The echo server keeps the same trace of requests per flow (the request direction).

Run inside application namespaces (``ip netns exec NS python -m owx.thorn.probe ...``);
each process runs until SIGTERM and then writes a JSON report. Times are
CLOCK_MONOTONIC, which every namespace of a machine shares, so a caller can line
gaps up with the moment it injected a fault.
"""

from __future__ import annotations

import argparse
import errno
import json
import selectors
import signal
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REQUEST = struct.Struct("!HQd")  # flow, sequence, send time
PAD = b"\0" * 46
GAP_MIN_MS = 3.0
RCVBUF = 8 << 20
SO_RCVBUFFORCE = 33  # Linux; not exported by the socket module


def stopper() -> threading.Event:
    """An event set by SIGTERM or SIGINT."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def address(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


@dataclass
class GapTrace:
    """Arrival times of one flow, kept as the gaps longer than ``min_ms`` between arrivals."""

    started: float
    min_ms: float = GAP_MIN_MS
    last: float | None = None
    count: int = 0
    gaps: list[tuple[float, float]] = field(default_factory=list)  # (start, length ms)

    def arrived(self, now: float) -> None:
        since = self.started if self.last is None else self.last
        if (now - since) * 1000 > self.min_ms:
            self.gaps.append((since, (now - since) * 1000))
        self.last = now
        self.count += 1

    def close(self, now: float) -> list[tuple[float, float]]:
        """The gaps, with an open one running to ``now`` if nothing arrived since."""
        since = self.started if self.last is None else self.last
        tail = [(since, (now - since) * 1000)] if (now - since) * 1000 > self.min_ms else []
        return self.gaps + tail


def min_gap_ms(interval_ms: float) -> float:
    """Gaps worth keeping for a flow sent every ``interval_ms``: longer than two intervals."""
    return max(GAP_MIN_MS, 2 * interval_ms)


def outage_ms(gaps: list[tuple[float, float]], start: float, end: float) -> float:
    """The longest gap that overlaps [start, end] (monotonic s), cut at ``end``; 0 if none."""
    worst = 0.0
    for began, length_ms in gaps:
        finished = began + length_ms / 1000
        if began <= end and finished >= start:
            worst = max(worst, (min(finished, end) - began) * 1000)
    return worst


def echo(bind: str, interval_ms: float) -> dict:
    """Answer every request; trace the requests of each flow (client address), sent every ``interval_ms``."""
    stop = stopper()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)  # all flows share it
    sock.bind(address(bind))
    sock.settimeout(0.05)
    started = time.monotonic()
    traces: dict[str, GapTrace] = {}
    while not stop.is_set():
        try:
            data, peer = sock.recvfrom(256)
        except TimeoutError:
            continue
        now = time.monotonic()
        try:
            sock.sendto(data, peer)
        except OSError:  # no route back right now: the client sees the lost answer
            pass
        key = f"{peer[0]}:{peer[1]}"
        traces.setdefault(key, GapTrace(started, min_gap_ms(interval_ms))).arrived(now)
    now = time.monotonic()
    return {"started": started, "stopped": now,
            "flows": {key: {"received": t.count, "gaps": t.close(now)} for key, t in traces.items()}}


def rt_client(to: str, flows: int, interval_ms: float) -> dict:
    """Send one request per flow every ``interval_ms`` (spread evenly); trace the answers per flow."""
    stop = stopper()
    dest = address(to)
    selector = selectors.DefaultSelector()
    sockets = []
    for flow in range(flows):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setblocking(False)
        sock.connect(dest)
        selector.register(sock, selectors.EVENT_READ, flow)
        sockets.append(sock)
    started = time.monotonic()
    traces = [GapTrace(started, min_gap_ms(interval_ms)) for _ in range(flows)]
    sent = [0] * flows
    send_errors = 0
    step = interval_ms / 1000 / flows
    next_at, turn = started, 0
    while not stop.is_set():
        now = time.monotonic()
        if now - next_at > 0.1:  # we were descheduled: do not burst to catch up
            next_at = now
        while next_at <= now:
            flow = turn % flows
            try:
                sockets[flow].send(REQUEST.pack(flow, sent[flow], now) + PAD)
            except OSError:  # no route or an ICMP error during a fault: the request is lost
                send_errors += 1
            sent[flow] += 1
            turn += 1
            next_at += step
        for key, _ in selector.select(max(0.0, next_at - time.monotonic())):
            _drain(key.fileobj, traces[key.data])  # type: ignore[arg-type]
    now = time.monotonic()
    return {"started": started, "stopped": now, "interval_ms": interval_ms, "send_errors": send_errors,
            "flows": [{"port": s.getsockname()[1], "sent": n, "received": t.count, "gaps": t.close(now)}
                      for s, n, t in zip(sockets, sent, traces)]}


def _drain(sock: socket.socket, trace: GapTrace) -> None:
    while True:
        try:
            sock.recv(256)
        except BlockingIOError:
            return
        except OSError as exc:  # ICMP error queued on the connected socket
            if exc.errno in (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH):
                continue
            raise
        trace.arrived(time.monotonic())


def emit(report: dict, out: Path | None) -> None:
    """Write a role's report to ``out`` (or stdout) as JSON."""
    text = json.dumps(report)
    if out:
        out.write_text(text)
    else:
        sys.stdout.write(text + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m owx.thorn.probe", description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=["echo", "rt-client"])
    parser.add_argument("address", help="IP:PORT to send to / bind")
    parser.add_argument("--flows", type=int, default=32)
    parser.add_argument("--interval-ms", type=float, default=5.0, help="per flow")
    parser.add_argument("--out", type=Path, help="write the JSON report here (default stdout)")
    args = parser.parse_args(argv)
    emit(echo(args.address, args.interval_ms) if args.role == "echo"
         else rt_client(args.address, args.flows, args.interval_ms), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
