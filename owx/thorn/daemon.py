"""``owx thorn run``: set a node up, run FRR and the reconciler, serve state and metrics over HTTP.

GET /state -> NodeState JSON, GET /metrics -> Prometheus text, GET /healthz -> 200/503,
POST /reconciler {"drop_events": f, "period_s": s, "fast_failover": b, "driver": d} -> change the
reconciler at run time (tests, benchmarks). That switches failover off for every tenant on the node:
on an address other than loopback it needs ``OWX_THORN_TOKEN`` (:mod:`owx.common.bearer`), and is
refused when none is set.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pydantic import ValidationError

from owx.common import bearer
from owx.thorn.datapath.detect import DriverUnavailable, make_driver
from owx.thorn.frr import FrrError, FrrInstance
from owx.thorn.frr_config import DAEMONS, host_config
from owx.thorn.model import DriverName, NodeSpec, format_errors
from owx.thorn.reconciler import Reconciler
from owx.thorn.setup import setup_node
from owx.thorn.steering import Steering
from owx.thorn.state import (BfdPeerState, BgpPeerState, FailoverState, NodeState, ReconcilerControl,
                             ReconcilerState, RuleState, prometheus)

log = logging.getLogger(__name__)
TOKEN_ENV = "OWX_THORN_TOKEN"
MAX_CONTROL_BYTES = 64 * 1024  # a reconciler change is a few fields
HEALTH_PERIOD_S = 3.0
RECOVERY_POLL_S = 0.5  # while an uplink is down: its BGP session decides when it is used again


class NodeDaemon:
    """Everything THORN runs on one node."""

    def __init__(self, node: NodeSpec) -> None:
        self.node = node
        self.frr = FrrInstance(node.netns, node.run_dir, node.frr_rt_priority)
        self.steering = Steering(node)
        self.reconciler = Reconciler(node, make_driver(node), on_vteps=self.steering.set_vteps)
        self._health: tuple[dict[str, bool], list[BgpPeerState], list[BfdPeerState], list[str]] = ({}, [], [], [])
        self._stop = threading.Event()
        self._http: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []

    def start(self) -> str:
        """Configure the node, start FRR, the reconciler and HTTP; return the HTTP address."""
        setup_node(self.node)
        self.frr.start(host_config(self.node))
        self.steering.start()
        self.reconciler.start()
        self._poll_health()
        host, port = self.node.http.rsplit(":", 1)
        self._http = ThreadingHTTPServer((host, int(port)), _handler(self))
        address = f"{host}:{self._http.server_address[1]}"
        (self.node.run_dir / "http.addr").write_text(address)
        for target in (self._http.serve_forever, self._health_loop):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("node %s up, driver %s, state on http://%s/state", self.node.name, self.reconciler.driver.name,
                 address)
        return address

    def stop(self, keep_frr: bool = False) -> None:
        self._stop.set()
        if self._http:
            self._http.shutdown()
            self._http.server_close()
        self.reconciler.stop()
        self.reconciler.driver.close()
        self.steering.stop()
        if not keep_frr:
            self.frr.stop()

    def _health_loop(self) -> None:
        while not self._stop.wait(RECOVERY_POLL_S if self.steering.status.down else HEALTH_PERIOD_S):
            self._poll_health()

    def _poll_health(self) -> None:
        errors: list[str] = []
        daemons = {d: self.frr.pid(d) is not None for d in DAEMONS}
        for d, up in daemons.items():
            if not up:
                errors.append(f"FRR daemon {d} is not running in {self.node.netns or 'this namespace'} "
                              f"(run dir {self.node.run_dir}); forwarding continues on the installed routes")
        bgp: list[BgpPeerState] = []
        bfd: list[BfdPeerState] = []
        try:
            if daemons["bgpd"]:
                polled_at = time.monotonic()
                summary = self.frr.vtysh_json("show bgp summary json").get("ipv4Unicast", {})
                bgp = [BgpPeerState(peer=p, state=v.get("state", "?"), uptime_ms=v.get("peerUptimeMsec", 0),
                                    prefixes_received=v.get("pfxRcd", 0))
                       for p, v in summary.get("peers", {}).items()]
                self.steering.bgp_polled({p.peer: p.state == "Established" for p in bgp}, polled_at)
            if daemons["bfdd"]:
                bfd = [BfdPeerState(peer=p["peer"], status=p.get("status", "?"),
                                    receive_ms=p.get("receive-interval", 0), transmit_ms=p.get("transmit-interval", 0),
                                    detect_multiplier=p.get("detect-multiplier", 0), uptime_s=p.get("uptime", 0))
                       for p in self.frr.vtysh_json("show bfd peers json")]
        except FrrError as exc:
            errors.append(str(exc))
        st = self.reconciler.status
        if st.last_error:
            errors.append(f"reconciler: {st.last_error}")
        if not self.steering.alive():
            errors.append("the fast failover (steering) process is not running")
        elif self.steering.status.last_error:
            errors.append(f"fast failover: {self.steering.status.last_error}")
        self._health = (daemons, bgp, bfd, errors)

    def state(self) -> NodeState:
        daemons, bgp, bfd, errors = self._health
        st, fo = self.reconciler.status, self.steering.status
        return NodeState(
            node=self.node.name, loopback=str(self.node.loopback), frr_daemons=daemons, bgp=bgp, bfd=bfd,
            paths={v: fo.overrides.get(v, [f"{h.gateway}@{h.dev}" for h in hops]) for v, hops in st.paths.items()},
            rules=[RuleState(mac=r.mac, vtep=r.vtep, vni=r.vni, nexthops=[f"{h.gateway}@{h.dev}" for h in r.nexthops])
                   for r in st.rules],
            reconciler=ReconcilerState(
                driver=self.reconciler.driver.name, period_s=self.reconciler.period_s, reconciles=st.reconciles,
                last_reconcile=st.last_at, last_reconcile_age_s=round(time.time() - st.last_at, 3),
                last_reason=st.last_reason, last_duration_ms=round(st.last_duration_ms, 2), events=st.events,
                events_dropped=st.events_dropped, overflows=st.overflows, rules_added=st.rules_added,
                rules_removed=st.rules_removed, errors=st.errors, last_error=st.last_error, dumps=st.dumps),
            failover=FailoverState(**{k: v for k, v in asdict(fo).items() if k not in ("errors", "last_error")}),
            errors=errors)


def _handler(daemon: NodeDaemon) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = 10.0  # a client that stops sending mid-request holds its thread no longer

        def do_GET(self) -> None:  # noqa: N802
            path = self.path.split("?")[0]
            if path == "/state":
                self._send(200, "application/json", daemon.state().model_dump_json(indent=1))
            elif path == "/metrics":
                self._send(200, "text/plain; version=0.0.4", prometheus(daemon.state()))
            elif path == "/healthz":
                errors = daemon.state().errors
                self._send(503 if errors else 200, "application/json", json.dumps({"ok": not errors, "errors": errors}))
            else:
                self._error(404, f"no resource {path}; try /state, /metrics")

        def do_POST(self) -> None:  # noqa: N802
            if self.path.split("?")[0] != "/reconciler":
                self._error(404, f"cannot POST {self.path}")
                return
            token = os.environ.get(TOKEN_ENV) or None
            if not token and not bearer.is_loopback(self.server.server_address[0]):
                self._error(403, f"changing the reconciler over the network needs {TOKEN_ENV} set on the daemon")
                return
            if not bearer.authorized(self.headers.get("Authorization"), token):
                self._error(401, f"the reconciler needs the token: Authorization: Bearer <{TOKEN_ENV}>")
                return
            length = self.headers.get("Content-Length") or "0"
            if not length.isdigit() or int(length) > MAX_CONTROL_BYTES:
                self.close_connection = True
                self._error(413 if length.isdigit() else 400,
                            f"a reconciler change is a JSON body of at most {MAX_CONTROL_BYTES} bytes with its length")
                return
            body = self.rfile.read(int(length))
            try:
                control = ReconcilerControl.model_validate_json(body or b"{}")
            except ValidationError as exc:
                self._error(400, format_errors(exc))
                return
            rec = daemon.reconciler
            if control.drop_events is not None:
                rec.drop_events = control.drop_events
            if control.period_s is not None:
                rec.period_s = control.period_s
                rec.kick()
            if control.fast_failover is not None:
                daemon.steering.set_enabled(control.fast_failover)
            if control.driver is not None:
                try:
                    rec.replace_driver(make_driver(daemon.node, control.driver))
                except DriverUnavailable as exc:
                    self._error(409, str(exc))
                    return
            self._send(200, "application/json", ReconcilerControl(
                drop_events=rec.drop_events, period_s=rec.period_s, fast_failover=daemon.steering.status.enabled,
                driver=control.driver or DriverName(rec.driver.name)).model_dump_json())

        def _error(self, code: int, message: str) -> None:
            self._send(code, "application/json", json.dumps({"error": message, "code": code}))

        def _send(self, code: int, ctype: str, body: str) -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, fmt: str, *args) -> None:
            log.debug(fmt, *args)

    return Handler


def run_daemon(node: NodeSpec) -> int:
    """Run until SIGTERM/SIGINT."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, node.daemon_nice)  # before any thread starts: they inherit it
    except PermissionError:
        log.warning("cannot set nice %d (needs CAP_SYS_NICE); the reconciler runs at normal priority",
                    node.daemon_nice)
    daemon = NodeDaemon(node)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        daemon.start()
        stop.wait()
    finally:
        daemon.stop()
    return 0
