"""One Redis user per namespace in Canary's checkpoint store, so that one store serves many tenants.

A namespace's actions get a URL whose user reaches only the keys under that namespace's prefix and
runs only the commands of the checkpoint client (:data:`~owx.canary.checkpoint.kv_redis.COMMANDS`):
no scripts, no key listing, no ``MONITOR``, ``CLIENT LIST``, ``CONFIG`` or ``FLUSHALL``. Users and
passwords are derived from owx's own Redis password (HMAC), so every gateway configured with the
same store URL derives the same ones and no state is kept; owx (re)defines a namespace's user before
its stateful functions run (at most every few seconds), which also restores users a restarted Redis forgot.
Redis keeps no byte count per user; :class:`~owx.canary.store_quota.StoreQuota` keeps one and takes
a namespace's writes away (:meth:`RedisTenants.cut_writes`) while it holds more than its budget, a
mark kept in the store itself, which every gateway's definitions of that user keep.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from owx.canary.checkpoint.kv_redis import COMMANDS
from owx.canary.checkpoint.options import StoreOptions

log = logging.getLogger(__name__)

SCHEMES = ("redis", "rediss")
WRITES = ("set", "incrby")  # the client's commands that add bytes (a namespace over its budget loses them)
DIGEST_LENGTH = 32
CONNECT_TIMEOUT_S = 2.0
_GLOB = re.compile(r"([*?\[\]\\])")


class RedisTenants:
    """The per-namespace users of the Redis store at an admin URL (one with a password)."""

    def __init__(self, admin_url: str) -> None:
        """Needs the ``redis`` package (owx's ``canary`` extra), as the store itself does."""
        import redis

        parts = urlsplit(admin_url)
        if not self.isolates(admin_url):
            raise ValueError("tenant users need a redis:// or rediss:// store URL with a password")
        self._secret = unquote(parts.password or "").encode()
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        self._base_prefix = query.pop("prefix", StoreOptions.prefix)
        self._query = query
        self._parts = parts
        self._errors = (redis.RedisError,)
        self.store_url = admin_url  # as configured, with its options
        self.admin_url = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
        self._admin = redis.Redis.from_url(self.admin_url, socket_connect_timeout=CONNECT_TIMEOUT_S,
                                           socket_timeout=CONNECT_TIMEOUT_S)
        # the digests of the namespaces whose writes are taken away, in the store (every gateway's), under
        # a key no namespace's prefix holds
        self._cut_key = f"{self._base_prefix}over-budget"

    @staticmethod
    def isolates(url: str) -> bool:
        """True if ``url`` names a Redis store owx logs into with a password (it can then make users;
        without one, any client is owx and reaches every key)."""
        parts = urlsplit(url)
        return parts.scheme in SCHEMES and bool(parts.password)

    @property
    def base_prefix(self) -> str:
        """What every namespace's key prefix starts with."""
        return self._base_prefix

    def user(self, namespace: str) -> tuple[str, str, str]:
        """The namespace's user name, password and key prefix."""
        digest = self.digest(namespace)
        password = hmac.new(self._secret, self._subject(namespace), hashlib.sha256).hexdigest()
        return user_name(digest), password, f"{self._base_prefix}{digest}:"

    def digest(self, namespace: str) -> str:
        """What names the namespace in its user's name and its key prefix."""
        return hashlib.sha256(self._subject(namespace)).hexdigest()[:DIGEST_LENGTH]

    def _subject(self, namespace: str) -> bytes:
        return f"{self._base_prefix}\0{namespace}".encode()

    def digest_of(self, key: bytes) -> str | None:
        """The digest naming the namespace whose prefix holds ``key`` (as its user's name and prefix
        hold it), or None for a key under no namespace's prefix."""
        base = self._base_prefix.encode()
        start, end = len(base), len(base) + DIGEST_LENGTH
        digest = key[start:end]
        if not key.startswith(base) or key[end:end + 1] != b":" or len(digest) != DIGEST_LENGTH \
                or digest.strip(b"0123456789abcdef"):
            return None
        return digest.decode()

    def cut_writes(self, digest: str, cut: bool) -> None:
        """Take the writes of the namespace named by ``digest`` away (``cut``) or give them back, for
        every gateway (one transaction with the mark :meth:`ensure` reads); its actions keep reading
        and deleting. Raises the store's error if it cannot be told."""
        with self._admin.pipeline(transaction=True) as transaction:
            (transaction.sadd if cut else transaction.srem)(self._cut_key, digest)
            transaction.execute_command("ACL", "SETUSER", user_name(digest),
                                        *(f"{'-' if cut else '+'}{command}" for command in WRITES))
            transaction.execute()

    def cut_digests(self) -> set[str]:
        """The digests of the namespaces whose writes are taken away."""
        return {digest.decode() for digest in self._admin.smembers(self._cut_key)}

    def url_for(self, namespace: str) -> str:
        """The store URL of ``namespace``'s actions: its user, its prefix, the admin URL's options."""
        name, password, prefix = self.user(namespace)
        host = self._parts.netloc.rpartition("@")[2]
        query = urlencode({**self._query, "prefix": prefix})
        return urlunsplit((self._parts.scheme, f"{name}:{quote(password, safe='')}@{host}", self._parts.path,
                           query, ""))

    def ensure(self, namespace: str) -> bool:
        """(Re)define the namespace's user; False if the store refused (logged: its actions then run
        without checkpoints, as when the store is down)."""
        name, password, prefix = self.user(namespace)
        keys = glob_literal(prefix) + "*"

        def define(transaction: Any) -> None:  # again if a cut comes between the read and the definition
            cut = transaction.sismember(self._cut_key, name.removeprefix(USER_PREFIX))
            allowed = [command for command in COMMANDS if not (cut and command in WRITES)]
            transaction.multi()
            transaction.execute_command("ACL", "SETUSER", name, "reset", "on", f">{password}", f"~{keys}",
                                        "resetchannels", "-@all", *(f"+{command}" for command in allowed))

        try:
            self._admin.transaction(define, self._cut_key)
            return True
        except self._errors as exc:
            log.warning("checkpoint store: cannot define the user of namespace %r: %s", namespace, exc)
            return False

    def close(self) -> None:
        self._admin.close()


USER_PREFIX = "owx-ckpt-"


def user_name(digest: str) -> str:
    """The Redis user of the namespace whose prefix holds ``digest``."""
    return USER_PREFIX + digest


def glob_literal(text: str) -> str:
    """``text`` as a literal in a Redis glob pattern."""
    return _GLOB.sub(r"\\\1", text)
