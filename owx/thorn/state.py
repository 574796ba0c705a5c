"""What the daemon exposes: a typed node state (JSON) and its Prometheus rendering."""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict, Field

from owx.thorn.model import DriverName


class RuleState(BaseModel):
    mac: str
    vtep: str
    vni: int
    nexthops: list[str]


class BgpPeerState(BaseModel):
    peer: str
    state: str
    uptime_ms: int = 0
    prefixes_received: int = 0


class BfdPeerState(BaseModel):
    peer: str
    status: str
    receive_ms: int = 0
    transmit_ms: int = 0
    detect_multiplier: int = 0
    uptime_s: int = 0


class ReconcilerState(BaseModel):
    driver: str
    period_s: float
    reconciles: int
    last_reconcile: float
    last_reconcile_age_s: float
    last_reason: str
    last_duration_ms: float
    events: int
    events_dropped: int
    overflows: int
    rules_added: int
    rules_removed: int
    errors: int
    last_error: str | None
    dumps: dict[str, int]


class FailoverState(BaseModel):
    """Fast failover: uplinks this node cannot use, ToRs remote VTEPs cannot be reached through, overrides."""

    enabled: bool
    down: list[str]
    remote_lost: dict[str, list[int]]
    overrides: dict[str, list[str]]
    notices_sent: int
    notices_received: int
    notices_rejected: int = Field(description="datagrams on the notice port that were not a valid notice from the "
                                  "VTEP they name")
    bfd_downs: int = Field(description="BFD sessions of this node that went from up to down")


class ReconcilerControl(BaseModel):
    """Run-time change to the reconciler (POST /reconciler)."""

    model_config = ConfigDict(extra="forbid")
    drop_events: float | None = Field(default=None, ge=0.0, le=1.0)
    period_s: float | None = Field(default=None, gt=0.05, le=3600)
    fast_failover: bool | None = None
    driver: DriverName | None = None


class NodeState(BaseModel):
    node: str
    loopback: str
    frr_daemons: dict[str, bool]
    bgp: list[BgpPeerState]
    bfd: list[BfdPeerState]
    paths: dict[str, list[str]]
    rules: list[RuleState]
    reconciler: ReconcilerState
    failover: FailoverState
    errors: list[str]
    time: float = 0.0

    def model_post_init(self, __context) -> None:
        self.time = self.time or time.time()


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def prometheus(state: NodeState) -> str:
    """Prometheus text exposition format (0.0.4)."""
    node = _esc(state.node)
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[dict[str, str], float]]) -> None:
        lines.append(f"# HELP thorn_{name} {help_text}")
        lines.append(f"# TYPE thorn_{name} {kind}")
        for labels, value in samples:
            label_text = ",".join(f'{k}="{_esc(v)}"' for k, v in {"node": node, **labels}.items())
            lines.append(f"thorn_{name}{{{label_text}}} {value}")

    r = state.reconciler
    metric("paths", "gauge", "usable next hops towards each remote VTEP",
           [({"vtep": v}, len(h)) for v, h in state.paths.items()])
    metric("rules", "gauge", "datapath forwarding rules installed", [({"driver": r.driver}, len(state.rules))])
    metric("bfd_session_up", "gauge", "1 if the BFD session is up",
           [({"peer": p.peer}, 1 if p.status == "up" else 0) for p in state.bfd])
    metric("bgp_session_established", "gauge", "1 if the BGP session is established",
           [({"peer": p.peer}, 1 if p.state == "Established" else 0) for p in state.bgp])
    metric("frr_daemon_up", "gauge", "1 if the FRR daemon is running",
           [({"daemon": d}, 1 if up else 0) for d, up in state.frr_daemons.items()])
    metric("reconcile_total", "counter", "completed reconcile passes", [({}, r.reconciles)])
    metric("reconcile_last_timestamp_seconds", "gauge", "unix time of the last pass", [({}, r.last_reconcile)])
    metric("reconcile_duration_ms", "gauge", "duration of the last pass", [({}, r.last_duration_ms)])
    metric("netlink_events_total", "counter", "netlink events received", [({}, r.events)])
    metric("netlink_events_dropped_total", "counter", "netlink events ignored on purpose", [({}, r.events_dropped)])
    metric("netlink_overflows_total", "counter", "ENOBUFS from the event socket", [({}, r.overflows)])
    metric("rules_added_total", "counter", "rules added to the datapath", [({}, r.rules_added)])
    metric("rules_removed_total", "counter", "rules removed from the datapath", [({}, r.rules_removed)])
    metric("reconcile_errors_total", "counter", "failed reconcile passes", [({}, r.errors)])
    fo = state.failover
    metric("failover_uplinks_down", "gauge", "uplinks fast failover keeps out of use", [({}, len(fo.down))])
    metric("failover_overrides", "gauge", "routes to remote VTEPs overridden ahead of BGP", [({}, len(fo.overrides))])
    metric("path_notices_sent_total", "counter", "path notices sent to remote nodes", [({}, fo.notices_sent)])
    metric("path_notices_received_total", "counter", "valid path notices received", [({}, fo.notices_received)])
    metric("path_notices_rejected_total", "counter", "datagrams rejected on the notice port",
           [({}, fo.notices_rejected)])
    metric("bfd_downs_total", "counter", "BFD sessions that went down", [({}, fo.bfd_downs)])
    metric("errors", "gauge", "current health problems", [({}, len(state.errors))])
    return "\n".join(lines) + "\n"
