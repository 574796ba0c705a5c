"""Load from another process with wrk (Debian's ``wrk``): one request shape, its figures parsed back.

wrk runs as its own process, so what it measures is what a client sees (its clock, real sockets).
A small Lua script sets the method, body and headers; ``requests`` bounds how many are sent in all
(each wrk thread stops after its share).
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0}


@dataclass(frozen=True)
class WrkResult:
    """What one wrk run measured."""

    requests: int
    seconds: float
    rate: float  # requests per second
    non_2xx: int
    errors: int  # connect, read, write and timeout errors
    p50_ms: float
    p99_ms: float


def wrk(url: str, *, connections: int, seconds: float, method: str = "GET", body: str | None = None,
        auth: str | None = None, threads: int = 2, rotating_auths: Sequence[str] = ()) -> WrkResult:
    """Run wrk against ``url`` for ``seconds`` (for a number of requests, see :mod:`owx.bench.ab`).
    With ``rotating_auths`` each request carries the next of those keys instead of ``auth`` (wrk's
    threads start at different places in them)."""
    if shutil.which("wrk") is None:
        raise SystemExit("owx bench: wrk is not installed (apt-get install wrk)")
    threads = max(1, min(threads, connections))
    lines = [f'wrk.method = "{method}"', 'wrk.headers["Content-Type"] = "application/json"']
    if body is not None:
        lines.append(f"wrk.body = [[{body}]]")
    if auth:
        lines.append(f'wrk.headers["Authorization"] = "{_basic(auth)}"')
    if rotating_auths:
        lines.extend(_rotating_auths(rotating_auths, threads))
    command = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency", "-s"]
    return parse(run_with_file(command, "\n".join(lines) + "\n", ".lua", [url], seconds + 120))


def _basic(auth: str) -> str:
    return f"Basic {base64.b64encode(auth.encode()).decode()}"


def _rotating_auths(auths: Sequence[str], threads: int) -> list[str]:
    """Lua that gives each request the next key; thread ``n`` starts ``n/threads`` of the way in (the
    keys are one string split at start: a table constructor of tens of thousands is too much for LuaJIT)."""
    return [f'local keys = {{}} for key in ("{" ".join(_basic(auth).split()[1] for auth in auths)}"):gmatch("%S+") '
            'do keys[#keys + 1] = "Basic " .. key end',
            "local started = 0",
            f"function setup(thread) thread:set('next_key', math.floor(started * #keys / {threads})) "
            "started = started + 1 end",
            "function request() next_key = next_key % #keys + 1 wrk.headers['Authorization'] = keys[next_key] "
            "return wrk.format() end"]


def run_with_file(command: list[str], text: str, suffix: str, rest: list[str], timeout_s: float) -> str:
    """Run ``command + [a temporary file holding text] + rest``; its stdout (RuntimeError if it fails)."""
    with tempfile.NamedTemporaryFile("w", suffix=suffix, delete=False) as held:
        held.write(text)
    try:
        done = subprocess.run([*command, held.name, *rest], capture_output=True, text=True, timeout=timeout_s)
    finally:
        Path(held.name).unlink()
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} failed: {done.stderr.strip() or done.stdout[-500:]}")
    return done.stdout


def parse(text: str) -> WrkResult:
    """wrk's report (``--latency``) as numbers."""
    total = re.search(r"(\d+) requests in ([\d.]+)(\w+)", text)
    if total is None:
        raise RuntimeError(f"no summary in wrk's output: {text}")
    seconds = float(total.group(2)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}[total.group(3)]
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    return WrkResult(
        requests=int(total.group(1)), seconds=seconds,
        rate=float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1)),  # type: ignore[union-attr]
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        errors=sum(int(n) for n in errors.groups()) if errors else 0,
        p50_ms=_percentile(text, "50%"), p99_ms=_percentile(text, "99%"),
    )


def _percentile(text: str, label: str) -> float:
    found = re.search(rf"^\s+{label}\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
    return float(found.group(1)) * UNITS[found.group(2)] if found else float("nan")
