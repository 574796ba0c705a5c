"""Checks shared by every backend, so bad input is refused the same way everywhere."""

from __future__ import annotations

import json
import re
import threading
import time

import orjson

from owx.gateway.stores.base import InvalidInput

#: Largest JSON encoding of one document (entity or activation record). CouchDB refuses
#: documents over its ``max_document_size``; raise that to at least this value.
MAX_DOC_BYTES = 16 * 1024 * 1024

_COLLECTION = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
_ACTIVATION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_REV = re.compile(r"[1-9][0-9]*-[0-9a-f]{1,64}")
MAX_REMEMBERED = 4096  # namespaces known to pass `check_namespace`
_valid_namespaces: set[str] = set()


def _text(value: object, what: str, max_len: int) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{what} must be a non-empty string, got {value!r:.80}")
    if len(value) > max_len:
        raise InvalidInput(f"{what} is longer than {max_len} characters")
    if "\x00" in value:
        raise InvalidInput(f"{what} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise InvalidInput(f"{what} is not valid unicode: {err.reason}") from None
    return value


def check_scope(namespace: object, collection: object) -> tuple[str, str]:
    """Validate the (namespace, collection) part of an entity key."""
    if not isinstance(collection, str) or not _COLLECTION.fullmatch(collection):
        raise InvalidInput(f"collection must match [a-z][a-z0-9_.-]* (at most 64 characters), got {collection!r:.80}")
    return check_namespace(namespace), collection


def check_key(namespace: object, collection: object, name: object) -> tuple[str, str, str]:
    """Validate an entity key; raise `InvalidInput` with the reason."""
    return (*check_scope(namespace, collection), _text(name, "name", 1024))


def describe(key: tuple[str, str, str]) -> str:
    """How errors name an entity: ``actions guest/pkg/hello``."""
    return f"{key[1]} {key[0]}/{key[2]}"


def check_namespace(namespace: object) -> str:
    if type(namespace) is str and namespace in _valid_namespaces:
        return namespace  # checked before (every activation's record checks its namespace)
    ns = check_field(_text(namespace, "namespace", 256), "namespace")
    if "/" in ns:
        raise InvalidInput(f"namespace must not contain '/': {ns!r}")
    if len(_valid_namespaces) >= MAX_REMEMBERED:
        _valid_namespaces.clear()
    _valid_namespaces.add(ns)
    return ns


def check_field(value: str, what: str) -> str:
    """``value`` unless it holds a tab or a newline, which separate the activation log's fields and lines."""
    if "\t" in value or "\n" in value:
        raise InvalidInput(f"{what} must not contain tabs or newlines: {value!r:.80}")
    return value


def check_name_filter(name: object) -> str | None:
    if name is not None and not isinstance(name, str):
        raise InvalidInput(f"name must be a string, got {name!r:.80}")
    return name


def check_prefix(prefix: object) -> str:
    if not isinstance(prefix, str):
        raise InvalidInput(f"prefix must be a string, got {prefix!r:.80}")
    return prefix


def check_page(skip: object, limit: object) -> tuple[int, int]:
    """``skip`` and ``limit`` as non-negative ints (``limit=0`` means no limit)."""
    for what, value in (("skip", skip), ("limit", limit)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidInput(f"{what} must be a non-negative integer, got {value!r:.80}")
    return skip, limit  # type: ignore[return-value]


def check_time(value: object, what: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInput(f"{what} must be epoch milliseconds (int), got {value!r:.80}")
    return value


def check_activation_id(value: object) -> str:
    if not isinstance(value, str) or not _ACTIVATION_ID.fullmatch(value):
        raise InvalidInput(f"activationId must match [A-Za-z0-9][A-Za-z0-9_.-]*, got {value!r:.80}")
    return value


def is_valid_rev(rev: str) -> bool:
    """Whether ``rev`` has the shape every backend produces (``N-hex``)."""
    return isinstance(rev, str) and _REV.fullmatch(rev) is not None


def encode_doc(doc: object, what: str = "document") -> str:
    """The JSON text of ``doc`` (a dict), or `InvalidInput` if it is not storable JSON.

    The text holds no raw tab or newline, which the activation log's line format relies on: both
    encoders escape every control character inside strings and put no whitespace between tokens.
    orjson encodes (on every activation's path, several times as fast); Python's strict encoder
    decides whenever orjson's text holds a null, which is how orjson writes NaN and infinities."""
    if not isinstance(doc, dict):
        raise InvalidInput(f"{what} must be a JSON object, got {type(doc).__name__}")
    try:
        raw = orjson.dumps(doc)
    except orjson.JSONEncodeError:  # a lone surrogate, an integer beyond 64 bits, too deep: Python's json says
        raw = b"null"
    if b"null" not in raw:  # orjson writes NaN and the infinities as null: without a null there was none
        text, size = raw.decode(), len(raw)
    else:
        try:
            text = json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
            size = len(text.encode("utf-8"))
        except (TypeError, ValueError) as err:  # UnicodeEncodeError is a ValueError
            raise InvalidInput(f"{what} is not storable JSON: {err}") from None
        except RecursionError:
            raise InvalidInput(f"{what} is nested too deeply") from None
    if size > MAX_DOC_BYTES:
        raise InvalidInput(f"{what} is {size} bytes of JSON, more than the limit of {MAX_DOC_BYTES}")
    return text


class UpdateClock:
    """Epoch-ms timestamps, strictly increasing within this object, so the order of
    ``updated`` is the order of writes even for several writes in one millisecond."""

    def __init__(self, after: int = 0) -> None:
        """``after``: the latest timestamp already handed out (e.g. the newest stored one)."""
        self._last = after
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            self._last = max(int(time.time() * 1000), self._last + 1)
            return self._last
