"""Namespaces and their keys; HTTP Basic authentication as OpenWhisk does it (``uuid:key``)."""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import threading
import time
import uuid as uuidlib
from dataclasses import dataclass

from owx.gateway.errors import UNAUTHENTICATED, ApiError
from owx.gateway.key_signing import SYSTEM_NAMESPACE, KeySigner
from owx.gateway.stores import Conflict, EntityStore

AUTH = "auth"
CACHE_TTL_S = 5.0
MAX_AUTH_HEADER = 1024
MAX_VERIFIED = 4096  # headers remembered as checked against a cached identity (then forgotten all at once)
MAX_OWNERS = 4096  # namespaces remembered with their owner, or as absent (then forgotten all at once)
MAX_ABSENT = 4096  # uuids remembered as naming no key (then forgotten all at once)
# What a key's two halves may be (owx makes 36-character uuids and 64-character secrets); anything
# else cannot name a stored key and is refused before the store is asked.
_UUID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", re.ASCII)
_KEY = re.compile(r"[ -~]{1,256}", re.ASCII)


@dataclass(frozen=True, slots=True)
class Identity:
    """The caller: a namespace and the key that authenticated it."""

    namespace: str
    uuid: str
    key: str
    outsider: bool = False  # a web action's caller other than its owner (no key, another namespace's), served as the owner

    @property
    def subject(self) -> str:
        return self.namespace

    @property
    def auth(self) -> str:
        return f"{self.uuid}:{self.key}"


def unauthenticated() -> ApiError:
    return ApiError(401, UNAUTHENTICATED, {"WWW-Authenticate": 'Basic realm="owx"'})


def _credentials(authorization: str | None) -> tuple[str, str]:
    """(uuid, key) of a Basic ``Authorization`` header that can name a stored key, else 401."""
    if not authorization or authorization[:6].lower() != "basic " or len(authorization) > MAX_AUTH_HEADER:
        raise unauthenticated()
    try:
        uuid, _, key = base64.b64decode(authorization[6:], validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise unauthenticated() from None
    if not _UUID.fullmatch(uuid) or not _KEY.fullmatch(key):
        raise unauthenticated()
    return uuid, key


def _named_uuid(authorization: str) -> str | None:
    """The uuid a Basic ``Authorization`` header names, read leniently (spaces anywhere, padding
    missing): what a client that mangles its header may still be sending of a key."""
    scheme, _, rest = authorization.strip().partition(" ")
    if scheme.lower() != "basic" or len(authorization) > MAX_AUTH_HEADER:
        return None
    text = "".join(rest.split())
    try:
        decoded = base64.b64decode(text + "=" * (-len(text) % 4)).decode("utf-8", errors="replace")
    except (binascii.Error, ValueError):
        return None
    uuid = decoded.partition(":")[0].strip()
    return uuid if _UUID.fullmatch(uuid) else None


def _checked(identity: Identity | None, key: str) -> Identity:
    if identity is None or not hmac.compare_digest(identity.key.encode(), key.encode()):
        raise unauthenticated()
    return identity


class Authenticator:
    """Looks callers up by the uuid of their key; creates namespaces."""

    def __init__(self, store: EntityStore) -> None:
        self.store = store
        self.signer = KeySigner.of(store)
        self._cache: dict[str, tuple[float, Identity]] = {}
        # Authorization headers whose key matched a cached entry: the same header against the same
        # entry matches again, so every invoke need not decode and compare it
        self._verified: dict[str, tuple[float, Identity]] = {}
        self._owners: dict[str, tuple[float, Identity | None]] = {}  # None: no such namespace (as briefly)
        self._absent: dict[str, float] = {}  # uuids the store had no key for, and when it said so
        self._lock = threading.Lock()

    def identify(self, authorization: str | None) -> Identity:
        """The identity behind an ``Authorization: Basic ...`` header, or 401 (may read the store)."""
        try:
            uuid, key = _credentials(authorization)
            return _checked(self._lookup(uuid), key)
        except ApiError:
            if authorization is not None:
                self._verified.pop(authorization, None)  # no longer any namespace's (see `turn_of`)
            raise

    def identify_cached(self, authorization: str | None) -> Identity | None:
        """:meth:`identify` without I/O: the identity if its key is cached, None if the store must be
        asked (call :meth:`identify` on a thread then), 401 when the header cannot name any key."""
        verified = self._verified.get(authorization) if authorization is not None else None
        if verified is not None and self._cache.get(verified[1].uuid) is verified \
                and time.monotonic() - verified[0] < CACHE_TTL_S:
            return verified[1]
        uuid, key = _credentials(authorization)
        cached = self._cache.get(uuid)
        if cached is None or time.monotonic() - cached[0] >= CACHE_TTL_S:
            if self._known_absent(uuid):
                raise unauthenticated()
            return None
        identity = _checked(cached[1], key)
        if len(self._verified) >= MAX_VERIFIED:
            self._verified = {}
        self._verified[authorization] = cached  # type: ignore[index]
        return identity

    def turn_of(self, authorization: str | None) -> str | None:
        """The namespace this exact header proved to be when it was last checked against a cached key,
        however long ago, else None: whose turn its request waits in before it is authenticated again
        (a returning caller need not queue with the unknown), never a proof of who sends it. A header
        that fails to authenticate is forgotten here, and so are a deleted or rotated key's."""
        verified = self._verified.get(authorization) if authorization is not None else None
        return None if verified is None else verified[1].namespace

    def signed_uuid(self, authorization: str | None) -> str | None:
        """The uuid of the header's key if owx made that key (`KeySigner`: no store read), else None.
        Whose turn its request waits in before the store is asked, never a proof of who sends it."""
        try:
            uuid, key = _credentials(authorization)
        except ApiError:
            return None
        return uuid if self.signer.signed(uuid, key) else None

    def names_a_key(self, authorization: str) -> bool:
        """Whether the header, read leniently, names the uuid of a stored key (may read the store): a
        header the API refuses as malformed may still carry a tenant's key."""
        uuid = _named_uuid(authorization)
        return uuid is not None and self._lookup(uuid) is not None

    def _lookup(self, uuid: str) -> Identity | None:
        cached = self._cache.get(uuid)
        if cached and time.monotonic() - cached[0] < CACHE_TTL_S:
            return cached[1]
        if self._known_absent(uuid):
            return None
        entity = self.store.get(SYSTEM_NAMESPACE, AUTH, uuid) if uuid else None
        if entity is None:
            with self._lock:
                if len(self._absent) >= MAX_ABSENT:
                    self._absent = {}
                self._absent[uuid] = time.monotonic()
            return None
        identity = Identity(entity.doc["namespace"], uuid, entity.doc["key"])
        with self._lock:
            self._cache[uuid] = (time.monotonic(), identity)
        return identity

    def _known_absent(self, uuid: str) -> bool:
        """Whether the store had no key for ``uuid`` within the cache's life (a made-up key asked again
        is refused without a store read)."""
        return time.monotonic() - self._absent.get(uuid, -CACHE_TTL_S) < CACHE_TTL_S

    def forget(self, uuid: str) -> None:
        """A key was deleted or rotated: stop answering with what was cached for it."""
        with self._lock:
            self._cache.pop(uuid, None)
            self._verified = {header: entry for header, entry in self._verified.items() if entry[1].uuid != uuid}
            self._owners = {ns: entry for ns, entry in self._owners.items()
                            if entry[1] is None or entry[1].uuid != uuid}

    def owner(self, namespace: str) -> Identity | None:
        """The first identity of ``namespace`` (web actions run as it), or None. Finding it reads every
        key, so a namespace's absence is remembered as briefly as an owner is: a flood of web requests
        to namespaces that do not exist reads the store once per name and ``CACHE_TTL_S``."""
        cached = self._owners.get(namespace)
        if cached and time.monotonic() - cached[0] < CACHE_TTL_S:
            return cached[1]
        identity = next((Identity(namespace, entity.name, entity.doc["key"])
                         for entity in self.store.list(SYSTEM_NAMESPACE, AUTH)
                         if entity.doc["namespace"] == namespace), None)
        with self._lock:
            if len(self._owners) >= MAX_OWNERS:
                self._owners = {}
            self._owners[namespace] = (time.monotonic(), identity)
        return identity

    def owner_cached(self, namespace: str) -> Identity | None:
        """:meth:`owner` without I/O: the owner if it is cached, None if it is not (or there is none)."""
        cached = self._owners.get(namespace)
        return cached[1] if cached and time.monotonic() - cached[0] < CACHE_TTL_S else None

    def created(self, namespace: str, uuid: str | None = None) -> None:
        """A key (``uuid``) of ``namespace`` was stored: neither is remembered as absent any more."""
        with self._lock:
            self._absent.pop(uuid or "", None)
            if (cached := self._owners.get(namespace)) is not None and cached[1] is None:
                del self._owners[namespace]

    def ensure_namespace(self, namespace: str, auth: str | None = None) -> Identity:
        """The first identity of ``namespace``, created (with ``auth`` or a new key) if absent."""
        existing = self.owner(namespace)
        if existing:
            return existing
        if auth:
            uuid, _, key = auth.partition(":")
        else:
            uuid = str(uuidlib.uuid4())
            key = self.signer.new_secret(uuid)
        try:
            self.store.put(SYSTEM_NAMESPACE, AUTH, uuid, {"namespace": namespace, "key": key}, None)
        except Conflict:
            pass
        self.created(namespace, uuid)
        return Identity(namespace, uuid, key)
