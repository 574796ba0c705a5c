"""Whose requests a request waits behind for one of the gateway's Flask threads (its turn in the
:class:`~owx.gateway.http.fair_pool.FairPool`), decided on the event loop without a store read.

- a namespace's API calls: the namespace, when the key is cached and right, or when this very
  header proved to be that namespace's before (`Authenticator.turn_of`: the view authenticates
  it again);
- its web actions: ``web:NAMESPACE`` once the namespace's owner is cached (they run as the owner,
  whoever calls them), counted in one share with its API calls (`share_of`);
- requests known to fail (no key, a malformed one, a wrong secret for a cached key, a uuid the
  store just said is nobody's): `REFUSED_TURN`;
- a key owx made (its MAC checks, :mod:`owx.gateway.key_signing`) that must be looked up: a turn
  of its own (`SIGNED_TURN`), all of them counted in one share of their own (`SIGNED_SHARE`), so
  that made-up keys, which cannot have a MAC, never hold their threads;
- everyone else, whose key or web namespace the store must look up: a turn per client address
  (an IPv6 address's /64, the block one host is given), all of them counted in one share, so that
  one address sending made-up key after made-up key queues only its own requests, not another
  address's new tenant, nor one behind the same address whose key owx made (`unknown_turn`).
  Behind a proxy every caller with a key given to owx has the proxy's address and they share one
  turn, as they all do with ``unknown_turn_by_address`` off.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from urllib.parse import unquote_to_bytes

from owx.gateway.errors import ApiError
from owx.gateway.http.fair_pool import SHARED
from owx.gateway.http.messages import Request
from owx.gateway.identity import Authenticator

WEB_PREFIX = b"/api/v1/web/"
WEB_TURN = "web:"  # before a namespace: its web actions' turn (no namespace name holds a colon)
REFUSED_TURN = ":refused"  # requests whose key is known to be wrong, or missing (no namespace's name)
UNKNOWN_TURN = ":unknown:"  # before a client's network: callers whose key is not known yet
SIGNED_TURN = ":signed:"  # before a key's uuid: a caller whose key owx made, not known yet
SIGNED_SHARE = ":signed"  # the share of every `SIGNED_TURN`
IPV6_HOST_PREFIX = 64


def request_turn(auth: Authenticator, request: Request, by_address: bool = True) -> str:
    """The turn ``request`` waits in (see the module's docstring)."""
    if request.raw_path.startswith(WEB_PREFIX):
        return _web_turn(auth, request, by_address)
    authorization = request.authorization
    try:
        identity = auth.identify_cached(authorization)
    except ApiError:
        return REFUSED_TURN
    if identity is not None:
        return identity.namespace
    return lookup_turn(auth, authorization, request.client, by_address)


def lookup_turn(auth: Authenticator, authorization: str | None, client: tuple[str, int] | None,
                by_address: bool = True) -> str:
    """The turn of a caller whose key is not cached, so the store must be read: the namespace this
    header proved before (`Authenticator.turn_of`), else its key's own if owx made it, else its
    address's `unknown_turn`."""
    if (namespace := auth.turn_of(authorization)) is not None:
        return namespace
    if (uuid := auth.signed_uuid(authorization)) is not None:
        return SIGNED_TURN + uuid
    return unknown_turn(client, by_address)


def unknown_turn(client: tuple[str, int] | None, by_address: bool = True) -> str:
    """The turn of a caller the store must look up: its address's, or `SHARED` (no address: a Unix
    socket; or ``by_address`` off)."""
    if not by_address or client is None:
        return SHARED
    return UNKNOWN_TURN + _network(client[0])


def share_of(turn: str) -> str:
    """The share of the threads ``turn`` counts against: a namespace's API and web turns one share,
    the keys owx made `SIGNED_SHARE`, every other unknown caller's turn the one `SHARED` share."""
    if turn.startswith(UNKNOWN_TURN):
        return SHARED
    if turn.startswith(SIGNED_TURN):
        return SIGNED_SHARE
    return turn.removeprefix(WEB_TURN)


def _web_turn(auth: Authenticator, request: Request, by_address: bool) -> str:
    """``web:NAMESPACE`` once the namespace's owner is cached, so that a public flood of one tenant's
    web actions waits behind itself, neither behind nor before other tenants' web actions or their own
    API calls; before, and for namespaces that do not exist, the caller's `unknown_turn` (made-up
    names buy no turns)."""
    namespace = unquote_to_bytes(request.raw_path[len(WEB_PREFIX):].partition(b"/")[0]).decode("utf-8", "replace")
    if auth.owner_cached(namespace) is None:
        return unknown_turn(request.client, by_address)
    return WEB_TURN + namespace


@lru_cache(maxsize=4096)
def _network(host: str) -> str:
    """``host`` as the network one client holds: an IPv4 address (an IPv4-mapped one's too), an IPv6
    address's /64; anything else as it is."""
    try:
        address = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        network = ipaddress.IPv6Network((address, IPV6_HOST_PREFIX), strict=False)
        return f"{network.network_address}/{IPV6_HOST_PREFIX}"
    return str(address)
