"""Fast failover's decisions: which uplinks are down, which routes are overridden, what is announced."""

from __future__ import annotations

import ipaddress

from owx.thorn.bfdctl import BfdEvent
from owx.thorn.failover import EXPIRY_S, LINGER_S, REFRESH_S, FailoverState
from owx.thorn.model import NodeSpec, UplinkSpec
from owx.thorn.notices import Notice
from owx.thorn.view import KernelView, Link, Nexthop, Route

UP1, UP2 = Nexthop("172.16.1.0", "up1"), Nexthop("172.16.2.0", "up2")
REMOTE = "10.255.0.2"


def node() -> NodeSpec:
    return NodeSpec(name="h1", loopback="10.255.0.1", asn=65001,
                    uplinks=[UplinkSpec(name="up1", address="172.16.1.1/31", peer="172.16.1.0", peer_asn=65101),
                             UplinkSpec(name="up2", address="172.16.2.1/31", peer="172.16.2.0", peer_asn=65102)])


def view(carrier_up1: bool = True, hops: tuple[Nexthop, ...] = (UP1, UP2)) -> KernelView:
    v = KernelView()
    v.links = {2: Link(2, "up1", True, carrier_up1, "veth", None), 3: Link(3, "up2", True, True, "veth", None)}
    v.routes = [Route(ipaddress.IPv4Network(f"{REMOTE}/32"), hops, 186)]
    return v


def steer(st: FailoverState, v: KernelView, now: float):
    st.update_down(st.local_down(v, now), now)
    return st.desired(v, {REMOTE}, now)


def test_a_lost_carrier_or_bfd_session_takes_the_uplink_out_of_the_paths():
    st = FailoverState(node())
    assert steer(st, view(), 0.0) == {}
    assert steer(st, view(carrier_up1=False), 1.0) == {REMOTE: (UP2,)}
    st = FailoverState(node())
    st.on_bfd([BfdEvent("172.16.2.0", "up2", "up")])
    assert steer(st, view(), 0.0) == {}
    st.on_bfd([BfdEvent("172.16.2.0", "up2", "down")])
    assert steer(st, view(), 1.0) == {REMOTE: (UP1,)} and st.bfd_downs == 1


def test_an_uplink_is_used_again_only_after_its_bgp_session_is_back():
    st = FailoverState(node())
    st.on_bgp({"172.16.1.0": True, "172.16.2.0": True}, polled_at=0.0)
    steer(st, view(carrier_up1=False), 1.0)
    st.on_bgp({"172.16.1.0": True}, polled_at=0.5)  # a poll from before the loss says nothing
    assert steer(st, view(), 2.0) == {REMOTE: (UP2,)}
    st.on_bgp({"172.16.1.0": False}, polled_at=2.5)
    assert steer(st, view(), 3.0) == {REMOTE: (UP2,)}
    st.on_bgp({"172.16.1.0": True}, polled_at=3.5)
    assert steer(st, view(), 4.0) == {}


def test_a_remote_loss_steers_around_that_tor_until_it_is_not_repeated():
    st = FailoverState(node())
    st.on_notices([Notice(vtep=REMOTE, epoch=1.0, seq=5, lost=[65101])], now=10.0)
    assert steer(st, view(), 10.0) == {REMOTE: (UP2,)}
    st.on_notices([Notice(vtep=REMOTE, epoch=1.0, seq=4, lost=[])], now=10.1)  # older: ignored
    assert steer(st, view(), 10.1) == {REMOTE: (UP2,)}
    assert steer(st, view(), 10.0 + EXPIRY_S + 0.01) == {}


def test_no_override_once_bgp_agrees_or_nothing_would_be_left():
    st = FailoverState(node())
    st.on_notices([Notice(vtep=REMOTE, epoch=1.0, seq=1, lost=[65101])], now=0.0)
    assert steer(st, view(hops=(UP2,)), 0.0) == {}  # the withdrawal arrived: main is right already
    st.on_notices([Notice(vtep=REMOTE, epoch=1.0, seq=2, lost=[65101, 65102])], now=0.1)
    assert steer(st, view(), 0.1) == {}  # every path excluded: leave the main table alone
    st.enabled = False
    st.on_notices([Notice(vtep=REMOTE, epoch=1.0, seq=3, lost=[65101])], now=0.2)
    assert steer(st, view(), 0.2) == {}


def test_losses_are_announced_at_once_repeated_and_then_let_go():
    st = FailoverState(node())
    steer(st, view(), 0.0)
    assert st.notice(0.0) is None  # nothing lost, nothing to say
    steer(st, view(carrier_up1=False), 1.0)
    first = st.notice(1.0)
    assert first is not None and first.lost == [65101]
    assert st.notice(1.0 + REFRESH_S / 2) is None
    again = st.notice(1.0 + REFRESH_S)
    assert again is not None and again.seq > first.seq
    st.on_bgp({"172.16.1.0": True}, polled_at=2.0)
    steer(st, view(), 2.0)
    cleared = st.notice(2.0)
    assert cleared is not None and cleared.lost == []
    assert st.notice(2.0 + LINGER_S + 0.01) is None
    assert st.next_deadline() == float("inf")  # quiet again: the steering thread sleeps
