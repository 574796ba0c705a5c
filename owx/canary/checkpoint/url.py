"""Open a checkpoint store from its URL.

``sqlite:///var/owx/checkpoints.db``                 embedded default; blobs in ``<db>.blobs``
``sqlite:///path/db?blobs=/shared/dir``              blob tier elsewhere (e.g. NFS)
``redis://[user:password@]host:port/0[?blobs=/shared/dir]``
``ignite://host:10800[,host2:10800][?blobs=/shared/dir&cache=owx-checkpoints]``

A network store without ``blobs=`` keeps large values in the KV itself, up to ``stage_max``.

Query parameters are the fields of :class:`StoreOptions`. The redis and ignite client
packages are imported only when their URL is opened.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

from owx.canary.checkpoint.errors import BadStoreURL
from owx.canary.checkpoint.kv import KV
from owx.canary.checkpoint.options import StoreOptions
from owx.canary.checkpoint.store import CheckpointStore
from owx.common.urls import redact

SCHEMES = ("sqlite", "redis", "rediss", "ignite")
REDIS_PORT = 6379


def open_checkpoint_store(url: str, *, on_warning: Callable[[str], None] | None = None) -> CheckpointStore:
    """The store ``url`` names; raises :class:`BadStoreURL` or :class:`StoreUnavailable`."""
    if not isinstance(url, str) or not url:
        raise BadStoreURL(f"a checkpoint store URL must be a non-empty string, got {url!r}")
    parts = urlsplit(url)
    query = _query(parts.query)
    options = StoreOptions.from_query(query)
    if parts.scheme == "sqlite":
        kv, default_blobs = _sqlite(parts)
    elif parts.scheme in ("redis", "rediss"):
        kv, default_blobs = _redis(parts, options), None
    elif parts.scheme == "ignite":
        kv, default_blobs = _ignite(parts, options), None
    else:
        raise BadStoreURL(f"unknown checkpoint store {parts.scheme!r} in {redact(url)!r}; use one of {', '.join(SCHEMES)}")
    blobs = options.blobs or default_blobs
    spool = options.spool or (blobs / ".spool" if blobs else None)
    try:
        if options.stage == "spool" and spool is None:
            raise BadStoreURL(f"stage=spool needs a spool or blob directory (spool= or blobs=) in {redact(url)!r}")
        return CheckpointStore(kv, options, blobs=blobs, spool=spool, on_warning=on_warning)
    except Exception:
        kv.close()
        raise


def store_ports(url: str) -> list[int]:
    """The TCP ports the store at ``url`` serves on (none for SQLite)."""
    parts = urlsplit(url)
    if parts.scheme in ("redis", "rediss"):
        return [parts.port or REDIS_PORT]
    if parts.scheme == "ignite":
        try:
            return [port for _, port in _ignite_nodes(parts.netloc.rpartition("@")[2])]
        except BadStoreURL:  # the store says so when it is opened
            return []
    return []


def _query(text: str) -> dict[str, str]:
    try:
        parsed = parse_qs(text, keep_blank_values=True, strict_parsing=bool(text))
    except ValueError as exc:
        raise BadStoreURL(f"malformed query string {text!r}: {exc}") from exc
    duplicated = [name for name, values in parsed.items() if len(values) > 1]
    if duplicated:
        raise BadStoreURL(f"store options given more than once: {', '.join(duplicated)}")
    return {name: values[0] for name, values in parsed.items()}


def _sqlite(parts) -> tuple[KV, Path]:
    from owx.canary.checkpoint.kv_sqlite import SqliteKV

    if parts.netloc or not parts.path.startswith("/") or parts.path == "/":
        raise BadStoreURL(f"sqlite store URL needs an absolute file path: sqlite:///path/to/db, got {urlunsplit(parts)!r}")
    path = Path("/" + unquote(parts.path).lstrip("/"))  # sqlite:///abs and sqlite:////abs alike
    return SqliteKV(path), path.with_name(path.name + ".blobs")


def _redis(parts, options: StoreOptions) -> KV:
    from owx.canary.checkpoint.kv_redis import RedisKV

    if not parts.hostname:
        raise BadStoreURL(f"redis store URL needs a host: redis://host:port/db, got {redact(urlunsplit(parts))!r}")
    client_url = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
    return RedisKV(client_url, options.prefix, options.timeout)


def _ignite(parts, options: StoreOptions) -> KV:
    from owx.canary.checkpoint.kv_ignite import IgniteKV

    credentials, _, hosts = parts.netloc.rpartition("@")
    nodes = _ignite_nodes(hosts)
    if not nodes:
        raise BadStoreURL(f"ignite store URL needs at least one host:port, got {redact(urlunsplit(parts))!r}")
    username, _, password = credentials.partition(":")
    return IgniteKV(nodes, options.cache, options.timeout, unquote(username) or None, unquote(password) or None)


def _ignite_nodes(hosts: str) -> list[tuple[str, int]]:
    """``host:port[,host:port]`` as (host, port) pairs."""
    nodes = []
    for host in filter(None, hosts.split(",")):
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit():
            raise BadStoreURL(f"ignite store URL needs host:port nodes, got {host!r}")
        nodes.append((name, int(port)))
    return nodes
