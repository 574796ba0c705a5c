"""Application-level traffic for measuring failover: a 1 ms UDP probe and a long-running TCP pair.

Run inside application namespaces (``ip netns exec NS python -m owx.thorn.probe ...``);
each process runs until SIGTERM and then writes a JSON report. Times are
CLOCK_MONOTONIC, which every namespace of a machine shares, so a caller can
line gaps up with the moment it injected a fault.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import struct
import sys
import threading
import time
from pathlib import Path

PACKET = struct.Struct("!Qd")  # sequence, send time
GAP_REPORT_MS = 3.0


def _stopper() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _addr(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def udp_send(to: str, interval_ms: float) -> dict:
    stop = _stopper()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dest = _addr(to)
    seq = 0
    errors = 0
    next_at = time.monotonic()
    while not stop.is_set():
        try:
            sock.sendto(PACKET.pack(seq, time.monotonic()) + b"\0" * 48, dest)
        except OSError:  # e.g. no route during a fault: the packet is lost, keep the clock
            errors += 1
        seq += 1
        next_at += interval_ms / 1000
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        elif delay < -0.1:  # we were descheduled; do not burst to catch up
            next_at = time.monotonic()
    return {"sent": seq, "send_errors": errors}


def udp_recv(bind: str) -> dict:
    """Record every gap between consecutive arrivals longer than GAP_REPORT_MS."""
    stop = _stopper()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(_addr(bind))
    sock.settimeout(0.05)
    received = 0
    last_arrival: float | None = None
    max_seq = -1
    gaps: list[tuple[float, float]] = []
    while not stop.is_set():
        try:
            data = sock.recv(256)
        except TimeoutError:
            continue
        now = time.monotonic()
        seq, _sent = PACKET.unpack_from(data)
        received += 1
        max_seq = max(max_seq, seq)
        if last_arrival is not None and (now - last_arrival) * 1000 > GAP_REPORT_MS:
            gaps.append((last_arrival, (now - last_arrival) * 1000))
        last_arrival = now
    return {"received": received, "lost": max(0, max_seq + 1 - received), "gaps": gaps}


def pair_server(bind: str) -> dict:
    """Echo every message; count connections (more than one means the client reconnected)."""
    stop = _stopper()
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(_addr(bind))
    srv.listen(4)
    srv.settimeout(0.2)
    connections = 0

    def echo(conn: socket.socket) -> None:
        with conn:
            while not stop.is_set():
                data = conn.recv(65536)
                if not data:
                    return
                conn.sendall(data)

    while not stop.is_set():
        try:
            conn, _ = srv.accept()
        except TimeoutError:
            continue
        connections += 1
        threading.Thread(target=echo, args=(conn,), daemon=True).start()
    return {"connections": connections}


def pair_client(to: str, interval_ms: float, size: int = 4096) -> dict:
    """Exchange a message every interval; reconnect on any error and count it; track the longest stall."""
    stop = _stopper()
    reconnects = -1
    exchanges = 0
    max_rtt_ms = 0.0
    payload = b"x" * size
    while not stop.is_set():
        try:
            with socket.create_connection(_addr(to), timeout=30) as sock:
                reconnects += 1
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                while not stop.is_set():
                    started = time.monotonic()
                    sock.sendall(payload)
                    got = 0
                    while got < size:
                        chunk = sock.recv(size - got)
                        if not chunk:
                            raise ConnectionError("peer closed")
                        got += len(chunk)
                    max_rtt_ms = max(max_rtt_ms, (time.monotonic() - started) * 1000)
                    exchanges += 1
                    time.sleep(interval_ms / 1000)
        except OSError:
            time.sleep(0.1)
    return {"reconnects": max(0, reconnects), "exchanges": exchanges, "max_stall_ms": round(max_rtt_ms, 1)}


def outage_ms(gaps: list[list[float]], start: float, end: float) -> float:
    """Longest arrival gap that overlaps [start, end] (monotonic seconds); 0 if none."""
    worst = 0.0
    for began, gap_ms in gaps:
        if began <= end and began + gap_ms / 1000 >= start:
            worst = max(worst, gap_ms)
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m owx.thorn.probe", description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=["udp-send", "udp-recv", "pair-server", "pair-client"])
    parser.add_argument("address", help="IP:PORT to send to / bind")
    parser.add_argument("--interval-ms", type=float, default=1.0)
    parser.add_argument("--out", type=Path, help="write the JSON report here (default stdout)")
    args = parser.parse_args(argv)
    if args.role == "udp-send":
        report = udp_send(args.address, args.interval_ms)
    elif args.role == "udp-recv":
        report = udp_recv(args.address)
    elif args.role == "pair-server":
        report = pair_server(args.address)
    else:
        report = pair_client(args.address, args.interval_ms)
    text = json.dumps(report)
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
