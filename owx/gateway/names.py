"""Entity names and fully qualified paths, validated as OpenWhisk validates them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from owx.gateway.errors import NAME_ILLEGAL, NAMESPACE_ILLEGAL, bad_request

# OpenWhisk: first char alphanumeric or underscore, then up to 255 of [\w@ .-], no trailing space.
_NAME = re.compile(r"\A(?:\w|\w[\w@ .-]{0,254}[\w@.-])\Z")
DEFAULT_PACKAGE = "default"


def valid_name(name: str) -> bool:
    return bool(_NAME.match(name))


def check_name(name: str) -> str:
    if not valid_name(name):
        raise bad_request(NAME_ILLEGAL)
    return name


def check_namespace(namespace: str) -> str:
    if not valid_name(namespace):
        raise bad_request(NAMESPACE_ILLEGAL)
    return namespace


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
