"""One Redis user per namespace in Canary's checkpoint store, so that one store serves many tenants.

A namespace's actions get a URL whose user reaches only the keys under that namespace's prefix and
runs only the commands of the checkpoint client (:data:`~owx.canary.checkpoint.kv_redis.COMMANDS`):
no scripts, no key listing, no ``MONITOR``, ``CLIENT LIST``, ``CONFIG`` or ``FLUSHALL``. Users and
passwords are derived from owx's own Redis password (HMAC), so every gateway configured with the
same store URL derives the same ones and no state is kept; owx (re)defines a namespace's user before
each attempt of its stateful functions, which also restores users a restarted Redis forgot.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from owx.canary.checkpoint.kv_redis import COMMANDS
from owx.canary.checkpoint.options import StoreOptions

log = logging.getLogger(__name__)

SCHEMES = ("redis", "rediss")
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
        self._admin = redis.Redis.from_url(urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")),
                                           socket_connect_timeout=CONNECT_TIMEOUT_S, socket_timeout=CONNECT_TIMEOUT_S)

    @staticmethod
    def isolates(url: str) -> bool:
        """True if ``url`` names a Redis store owx logs into with a password (it can then make users;
        without one, any client is owx and reaches every key)."""
        parts = urlsplit(url)
        return parts.scheme in SCHEMES and bool(parts.password)

    def user(self, namespace: str) -> tuple[str, str, str]:
        """The namespace's user name, password and key prefix."""
        subject = f"{self._base_prefix}\0{namespace}".encode()
        digest = hashlib.sha256(subject).hexdigest()[:32]
        password = hmac.new(self._secret, subject, hashlib.sha256).hexdigest()
        return f"owx-ckpt-{digest}", password, f"{self._base_prefix}{digest}:"

    def url_for(self, namespace: str) -> str:
        """The store URL of ``namespace``'s actions: its user, its prefix, the admin URL's options."""
        name, password, prefix = self.user(namespace)
        host = self._parts.netloc.rpartition("@")[2]
        query = urlencode({**self._query, "prefix": prefix})
        return urlunsplit((self._parts.scheme, f"{name}:{quote(password, safe='')}@{host}", self._parts.path,
                           query, ""))

    def ensure(self, namespace: str) -> None:
        """(Re)define the namespace's user; a failure is logged (its actions then run without
        checkpoints, as when the store is down)."""
        name, password, prefix = self.user(namespace)
        keys = _GLOB.sub(r"\\\1", prefix) + "*"  # the prefix as a literal in Redis' glob pattern
        rules = ["reset", "on", f">{password}", f"~{keys}", "resetchannels", "-@all",
                 *(f"+{command}" for command in COMMANDS)]
        try:
            self._admin.execute_command("ACL", "SETUSER", name, *rules)
        except self._errors as exc:
            log.warning("checkpoint store: cannot define the user of namespace %r: %s", namespace, exc)

    def close(self) -> None:
        self._admin.close()
