"""A long-running TCP pair (a parameter exchange) that handles path failure the way applications do.

The client sends ``size`` bytes, waits for the echo, and repeats every ``interval_ms``.
When an exchange makes no progress for ``detect_s`` (its heartbeat timeout) the
application declares the path dead, closes the connection and reconnects over the
next of its paths, as a training job bound to one NIC must. Over THORN the pair
has one path (the overlay address) and should never need to reconnect; bound to
the NICs themselves, it reconnects over the other NIC. Each completed exchange is
traced on the client's clock (see ``owx.thorn.probe.GapTrace``), so a caller reads
the time to resume after a fault from the report.

Run inside a namespace (``python -m owx.thorn.pair server|client ...``) until SIGTERM.
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time
from pathlib import Path

from owx.thorn.probe import GapTrace, address, emit, stopper


def server(bind: str) -> dict:
    """Echo every message; count connections."""
    stop = stopper()
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(address(bind))
    srv.listen(8)
    srv.settimeout(0.2)
    connections = 0

    def echo(conn: socket.socket) -> None:
        with conn:
            try:
                while data := conn.recv(65536):
                    conn.sendall(data)
            except OSError:
                return

    while not stop.is_set():
        try:
            conn, _ = srv.accept()
        except TimeoutError:
            continue
        connections += 1
        threading.Thread(target=echo, args=(conn,), daemon=True).start()
    return {"connections": connections}


def client(paths: list[tuple[str, str | None]], interval_ms: float, size: int, detect_s: float,
           status: Path | None) -> dict:
    """Exchange over ``paths[0]``; on a stall of ``detect_s`` reconnect over the next path.

    Each path is (server IP:PORT, local address to bind or None). ``status`` gets the
    index of the path in use after every (re)connection.
    """
    stop = stopper()
    started = time.monotonic()
    trace = GapTrace(started, min_ms=interval_ms + 5)
    failures: list[tuple[float, int]] = []  # (when the path was declared dead, its index)
    payload = b"p" * size
    index = 0
    while not stop.is_set():
        dest, bind = paths[index]
        try:
            sock = socket.create_connection(address(dest), timeout=detect_s,
                                            source_address=(bind, 0) if bind else None)
        except OSError:
            failures.append((time.monotonic(), index))
            index = (index + 1) % len(paths)
            stop.wait(0.01)  # an unreachable address fails at once: do not spin
            continue
        if status:
            status.write_text(str(index))
        try:
            with sock:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                while not stop.is_set():
                    sock.sendall(payload)
                    got = 0
                    while got < size:
                        chunk = sock.recv(size - got)
                        if not chunk:
                            raise ConnectionError("peer closed")
                        got += len(chunk)
                    trace.arrived(time.monotonic())
                    time.sleep(interval_ms / 1000)
        except OSError:  # a timeout (no progress for detect_s) or a reset: the path is dead
            failures.append((time.monotonic(), index))
            index = (index + 1) % len(paths)
    return {"exchanges": trace.count, "failures": failures, "gaps": trace.close(time.monotonic())}


def _path(text: str) -> tuple[str, str | None]:
    dest, _, bind = text.partition(",")
    return dest, bind or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m owx.thorn.pair", description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=["server", "client"])
    parser.add_argument("address", nargs="+", help="server: IP:PORT to bind; client: IP:PORT[,LOCAL_IP] per path")
    parser.add_argument("--interval-ms", type=float, default=10.0)
    parser.add_argument("--size", type=int, default=16384, help="bytes per exchange")
    parser.add_argument("--detect-s", type=float, default=1.0, help="heartbeat timeout")
    parser.add_argument("--status", type=Path, help="client: write the index of the path in use here")
    parser.add_argument("--out", type=Path, help="write the JSON report here (default stdout)")
    args = parser.parse_args(argv)
    if args.role == "server":
        report = server(args.address[0])
    else:
        report = client([_path(a) for a in args.address], args.interval_ms, args.size, args.detect_s, args.status)
    emit(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
