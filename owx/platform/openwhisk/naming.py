"""Where an owx action lives upstream: deterministic names, one upstream package per owx namespace.

* owx namespace ``NS`` → upstream package ``<prefix>-NS`` (private, in owx's upstream namespace;
  a longer one than OpenWhisk allows is cut and ends in a digest of ``NS``); nothing of one tenant
  is in another tenant's package, and tenants never hold the upstream key.
* owx action ``NS/[PKG/]NAME`` as deployed with one spec → upstream action
  ``[PKG.]NAME@<h>`` in that package, ``h`` the first 12 hex digits of the SHA-256 of the action's
  path and everything that is deployed (code, kind, image, main, memory, timeout, log limit,
  concurrency). A new revision or new limits (DiSDeL's) is a new upstream action; the old ones
  are deleted when the owx action is updated or deleted.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass

from owx.platform.types import ActionSpec

HASH_DIGITS = 12
MAX_SEGMENT = 256  # the longest name (of a package, an action) OpenWhisk allows
MAX_READABLE = 200  # of an action's name; the hash and '@' follow
MEMO_CODE_CHARS = 64 * 1024 * 1024  # code the digest memo keeps alive, whatever tenants deploy


@dataclass(frozen=True, slots=True)
class UpstreamName:
    """An action's place upstream."""

    package: str
    action: str

    @property
    def path(self) -> str:
        """``package/action``, as the upstream's REST routes take it."""
        return f"{self.package}/{self.action}"


def package_of(prefix: str, namespace: str) -> str:
    """``<prefix>-NS``; past OpenWhisk's 256 characters a name segment may have, its start and a
    digest of the namespace, exactly 256 long (no shorter name is one of these)."""
    package = f"{prefix}-{namespace}"
    if len(package) <= MAX_SEGMENT - HASH_DIGITS - 1:
        return package
    digest = hashlib.sha256(namespace.encode()).hexdigest()[:HASH_DIGITS]
    return f"{package[:MAX_SEGMENT - HASH_DIGITS - 1]}-{digest}"


def path_of(spec: ActionSpec) -> tuple[str, str]:
    """(owx namespace, ``[pkg/]name``) of a spec whose key is ``ns/[pkg/]name@revision``."""
    path = spec.key.rsplit("@", 1)[0]
    namespace, _, relative = path.partition("/")
    return namespace, relative


def readable_prefix(relative: str) -> str:
    """The part of upstream names that every deployment of ``[pkg/]name`` shares."""
    return relative.replace("/", ".")[:MAX_READABLE] + "@"


def upstream_name(prefix: str, spec: ActionSpec) -> UpstreamName:
    namespace, relative = path_of(spec)
    deployed = (spec.key, spec.kind, spec.code, spec.binary, spec.main, spec.image, spec.memory_mb,
                spec.timeout_ms, spec.logs_bytes, spec.concurrency)
    digest = _DIGESTS.digest(deployed, len(spec.code or ""))
    return UpstreamName(package_of(prefix, namespace), readable_prefix(relative) + digest)


class _DigestMemo:
    """Digests of recent deployments, so an action is hashed once per revision and limits, not per
    activation (its code may be megabytes). Least recently used first out, holding at most
    ``max_code_chars`` of code: many large revisions evict each other, they never grow memory."""

    def __init__(self, max_code_chars: int) -> None:
        self._max = max_code_chars
        self._held = 0
        self._digests: OrderedDict[tuple, tuple[str, int]] = OrderedDict()  # -> (digest, code chars)
        self._lock = threading.Lock()

    def digest(self, deployed: tuple, code_chars: int) -> str:
        with self._lock:
            if (known := self._digests.get(deployed)) is not None:
                self._digests.move_to_end(deployed)
                return known[0]
        text = json.dumps(deployed, separators=(",", ":"))
        digest = hashlib.sha256(text.encode()).hexdigest()[:HASH_DIGITS]
        with self._lock:
            if code_chars <= self._max and deployed not in self._digests:
                self._digests[deployed] = (digest, code_chars)
                self._held += code_chars
                while self._held > self._max:
                    self._held -= self._digests.popitem(last=False)[1][1]
        return digest


_DIGESTS = _DigestMemo(MEMO_CODE_CHARS)
