"""Subjects and their namespace keys, stored as OpenWhisk's ``wskadmin user`` keeps them.

A subject owns one key (``uuid:key``) per namespace it may use; the key's uuid addresses the
record in the store. Creating a subject gives it a namespace of its own name unless another is
named. Keys are random (a 36-character uuid and a 64-character secret ending in its MAC,
:mod:`owx.gateway.key_signing`); rotation replaces the secret and keeps the uuid.
"""

from __future__ import annotations

import uuid as uuidlib
from dataclasses import dataclass

from owx.gateway.identity import AUTH, SYSTEM_NAMESPACE
from owx.gateway.key_signing import KeySigner
from owx.gateway.names import valid_name
from owx.gateway.stores import Conflict, EntityStore


class AdminError(ValueError):
    """The request cannot be done (unknown subject, bad name, key in use); the message says why."""


@dataclass(frozen=True, slots=True)
class UserKey:
    """One namespace key of a subject."""

    subject: str
    namespace: str
    uuid: str
    key: str

    @property
    def auth(self) -> str:
        return f"{self.uuid}:{self.key}"


class Users:
    """The subjects of one owx instance; new secrets are signed by ``signer`` (the gateway's, else the
    store's read here)."""

    def __init__(self, store: EntityStore, signer: KeySigner | None = None) -> None:
        self.store = store
        self.signer = signer or KeySigner.of(store)

    def create(self, subject: str, namespace: str | None = None, auth: str | None = None) -> UserKey:
        """A new key of ``subject`` for ``namespace`` (default: the subject's name)."""
        namespace = namespace or subject
        check_name("subject", subject)
        check_name("namespace", namespace)
        if any(k.namespace == namespace for k in self.keys(subject)):
            raise AdminError(f"subject {subject!r} already has a key for namespace {namespace!r}")
        if auth:
            key_uuid, secret = parse_auth(auth)
        else:
            key_uuid = str(uuidlib.uuid4())
            secret = self.signer.new_secret(key_uuid)
        try:
            self.store.put(SYSTEM_NAMESPACE, AUTH, key_uuid, {"namespace": namespace, "key": secret, "subject": subject},
                           None)
        except Conflict:
            raise AdminError(f"the uuid {key_uuid} is in use") from None
        return UserKey(subject, namespace, key_uuid, secret)

    def keys(self, subject: str | None = None) -> list[UserKey]:
        """Every key (of ``subject``), oldest first."""
        found = [_key(e.name, e.doc) for e in self.store.list(SYSTEM_NAMESPACE, AUTH)]
        return [k for k in reversed(found) if subject is None or k.subject == subject]

    def delete(self, subject: str, namespace: str | None = None) -> list[UserKey]:
        """Remove the subject's keys (of ``namespace`` only, if given); the keys removed."""
        doomed = [k for k in self.keys(subject) if namespace is None or k.namespace == namespace]
        if not doomed:
            raise AdminError(f"no key of subject {subject!r}" + (f" for namespace {namespace!r}" if namespace else ""))
        for key in doomed:
            entity = self.store.get(SYSTEM_NAMESPACE, AUTH, key.uuid)
            if entity is not None:
                self.store.delete(SYSTEM_NAMESPACE, AUTH, key.uuid, entity.rev)
        return doomed

    def rotate(self, subject: str, namespace: str | None = None) -> UserKey:
        """A new secret for the subject's key of ``namespace`` (its only key, if not named)."""
        candidates = [k for k in self.keys(subject) if namespace is None or k.namespace == namespace]
        if len(candidates) != 1:
            raise AdminError(f"subject {subject!r} has {len(candidates)} matching keys; name the namespace")
        old = candidates[0]
        entity = self.store.get(SYSTEM_NAMESPACE, AUTH, old.uuid)
        if entity is None:
            raise AdminError(f"the key of subject {subject!r} vanished")
        fresh = UserKey(subject, old.namespace, old.uuid, self.signer.new_secret(old.uuid))
        self.store.put(SYSTEM_NAMESPACE, AUTH, old.uuid, {**entity.doc, "key": fresh.key}, entity.rev)
        return fresh


def check_name(label: str, name: str) -> None:
    """AdminError unless ``name`` can name a subject or namespace (``_`` ones are owx's own)."""
    if not valid_name(name) or not name.isascii() or name.startswith("_"):
        raise AdminError(f"{label} {name!r} is not a valid OpenWhisk name")


def _key(key_uuid: str, doc: dict) -> UserKey:
    return UserKey(doc.get("subject") or doc["namespace"], doc["namespace"], key_uuid, doc["key"])


def parse_auth(auth: str) -> tuple[str, str]:
    """(uuid, secret) of a ``uuid:key`` as OpenWhisk's keys are; AdminError otherwise."""
    key_uuid, _, secret = auth.partition(":")
    try:
        uuidlib.UUID(key_uuid)
    except ValueError:
        raise AdminError("auth must be UUID:KEY with a UUID before the colon") from None
    if len(secret) < 16 or not secret.isascii() or not secret.isprintable():
        raise AdminError("the key after the colon must be at least 16 printable ASCII characters")
    return key_uuid, secret
