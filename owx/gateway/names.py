"""Entity names and fully qualified paths, validated as OpenWhisk validates them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from owx.gateway.errors import NAME_ILLEGAL, NAME_TOO_LONG, NAMESPACE_ILLEGAL, bad_request

MAX_NAME_LENGTH = 256
#: OpenWhisk's EntityName: an ASCII word character, then up to 255 of [A-Za-z0-9_@ .&-], no trailing
#: space. ASCII only (Java's \w), so look-alikes such as a fullwidth "ｓ" are not names. (Written
#: so that Python and JSON Schema read it alike.)
NAME_PATTERN = r"[A-Za-z0-9_](?:[A-Za-z0-9_@ .&-]{0,%d}[A-Za-z0-9_@.&-])?" % (MAX_NAME_LENGTH - 2)
_NAME = re.compile(NAME_PATTERN)
DEFAULT_PACKAGE = "default"


def valid_name(name: str) -> bool:
    return _NAME.fullmatch(name) is not None


def _check(name: str, illegal: str, field: str) -> str:
    if valid_name(name):
        return name
    if len(name) > MAX_NAME_LENGTH:
        raise bad_request(NAME_TOO_LONG.format(field=field, size=len(name), allowed=MAX_NAME_LENGTH))
    raise bad_request(illegal)


def check_name(name: str) -> str:
    """``name`` if it is an OpenWhisk entity name, else 400 with OpenWhisk's message."""
    return _check(name, NAME_ILLEGAL, "Name segement")  # sic: OpenWhisk's spelling


def check_namespace(namespace: str) -> str:
    """``namespace`` if it is an OpenWhisk namespace name, else 400 with OpenWhisk's message."""
    return _check(namespace, NAMESPACE_ILLEGAL, "Namespace")


@dataclass(frozen=True, slots=True)
class EntityPath:
    """``namespace/[package/]name``: where an action lives."""

    namespace: str
    name: str
    package: str | None = None

    @property
    def relative(self) -> str:
        """Name inside the namespace (``pkg/name`` or ``name``): the store key."""
        return f"{self.package}/{self.name}" if self.package else self.name

    def __str__(self) -> str:
        return f"{self.namespace}/{self.relative}"

    @property
    def fqn(self) -> str:
        return f"/{self}"


def parse_relative(namespace: str, relative: str) -> EntityPath:
    """``name`` or ``pkg/name`` inside ``namespace`` -> EntityPath (names checked)."""
    parts = relative.split("/")
    if len(parts) == 1:
        return EntityPath(namespace, check_name(parts[0]))
    if len(parts) == 2:
        return EntityPath(namespace, check_name(parts[1]), check_name(parts[0]))
    raise bad_request(NAME_ILLEGAL)


def parse_fqn(reference: str, default_namespace: str) -> EntityPath:
    """A reference as sequences and the CLI write it: ``/ns/[pkg/]name``, ``pkg/name`` or ``name``.

    Like OpenWhisk, a leading ``/`` means the first segment is the namespace; ``_``
    stands for the caller's namespace.
    """
    if reference.startswith("/"):
        parts = reference[1:].split("/")
        if len(parts) < 2:
            raise bad_request(NAME_ILLEGAL)
        namespace = default_namespace if parts[0] == "_" else check_namespace(parts[0])
        return parse_relative(namespace, "/".join(parts[1:]))
    return parse_relative(default_namespace, reference)
