"""ApacheBench (``ab``) for an exact number of requests: wrk runs for a duration, and its Lua
``wrk.thread:stop()`` does not stop it (Debian's wrk 4.1), so a count-bounded load uses ab."""

from __future__ import annotations

import re
import shutil

from owx.bench.wrk import WrkResult, run_with_file


def ab(url: str, *, requests: int, connections: int, body: str, auth: str | None = None,
       timeout_s: float = 600.0) -> WrkResult:
    """POST ``body`` ``requests`` times over ``connections`` keep-alive connections; what ab measured."""
    if shutil.which("ab") is None:
        raise SystemExit("owx bench: ab is not installed (apt-get install apache2-utils)")
    command = ["ab", "-q", "-k", "-n", str(requests), "-c", str(connections), "-s", "60", "-T", "application/json"]
    if auth:
        command += ["-A", auth]
    return _parse(run_with_file([*command, "-p"], body, ".json", [url], timeout_s))


def _parse(out: str) -> WrkResult:
    def number(label: str, default: float = 0.0) -> float:
        found = re.search(rf"^{label}:\s+([\d.]+)", out, re.M)
        return float(found.group(1)) if found else default

    def percent(p: int) -> float:
        found = re.search(rf"^\s+{p}%\s+(\d+)", out, re.M)
        return float(found.group(1)) if found else float("nan")

    complete = int(number("Complete requests"))
    return WrkResult(requests=complete, seconds=number("Time taken for tests"), rate=number("Requests per second"),
                     non_2xx=int(number("Non-2xx responses")), errors=int(number("Failed requests")),
                     p50_ms=percent(50), p99_ms=percent(99))
