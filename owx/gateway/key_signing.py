"""Keys that prove owx made them: the last characters of a key's secret are a MAC of its uuid and
the rest, under a secret every gateway sharing the store reads from it.

A caller whose key is not cached must be looked up in the store, on one of the gateway's threads.
Made-up keys need that lookup too, so a flood of them from one address queued every new tenant
behind that address's turn (a NAT, a proxy). A key owx made is told from a made-up one without the
store: its turn is its own (:mod:`owx.gateway.turns`). Keys given to owx (``--auth``, OpenWhisk's
guest key) carry no MAC and are looked up as before; a MAC proves nothing about who sends a key,
the store's secret still does.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from owx.gateway.stores import Conflict, EntityStore

SYSTEM_NAMESPACE = "_system"  # where owx keeps its own records: no tenant can name it
COLLECTION = "secrets"
NAME = "key-signing"
KEY_CHARS = 64  # as OpenWhisk's keys
TAG_CHARS = 24  # 144 bits of MAC at the end of a key
_BODY_CHARS = KEY_CHARS - TAG_CHARS


class KeySigner:
    """Makes secrets for keys and checks whether a secret is one it made for a uuid."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    @classmethod
    def of(cls, store: EntityStore) -> "KeySigner":
        """The signer of every gateway on ``store``: its secret read, or made and stored by the first."""
        entity = store.get(SYSTEM_NAMESPACE, COLLECTION, NAME)
        if entity is None:
            secret = secrets.token_hex(32)
            try:
                store.put(SYSTEM_NAMESPACE, COLLECTION, NAME, {"secret": secret}, None)
                return cls(bytes.fromhex(secret))
            except Conflict:  # another gateway made it first: read that one
                entity = store.get(SYSTEM_NAMESPACE, COLLECTION, NAME)
                if entity is None:
                    raise RuntimeError("the key-signing secret could not be stored") from None
        return cls(bytes.fromhex(entity.doc["secret"]))

    def new_secret(self, uuid: str) -> str:
        """A random secret for the key ``uuid``, ending in its MAC."""
        body = secrets.token_urlsafe(_BODY_CHARS * 3 // 4)
        return body + self._tag(uuid, body)

    def signed(self, uuid: str, key: str) -> bool:
        """Whether ``key`` is a secret this signer made for ``uuid``."""
        return len(key) == KEY_CHARS and hmac.compare_digest(key[_BODY_CHARS:], self._tag(uuid, key[:_BODY_CHARS]))

    def _tag(self, uuid: str, body: str) -> str:
        digest = hmac.new(self._secret, f"{uuid}:{body}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode()[:TAG_CHARS]
