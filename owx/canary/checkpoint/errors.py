"""Errors of the checkpoint API and store.

Two families, treated differently by :class:`~owx.canary.checkpoint.api.Checkpointer`:
mistakes in the action's own checkpoint calls (:class:`InvalidCheckpoint`,
:class:`CheckpointTooLarge`) are raised to the action; failures of the store
(:class:`StoreUnavailable`) make the action run on without checkpoints, with a warning.
"""

from __future__ import annotations


class CheckpointError(Exception):
    """Base class of every checkpoint error."""


class InvalidCheckpoint(CheckpointError, ValueError):
    """A malformed checkpoint call: a bad name, state or a value that cannot be serialized."""


class CheckpointTooLarge(CheckpointError):
    """The serialized checkpoint exceeds the store's configured maximum size."""

    def __init__(self, size: int, limit: int, largest: str) -> None:
        super().__init__(
            f"checkpoint is {size} bytes, over the store's limit of {limit} bytes "
            f"(largest value: {largest!r}); checkpoint less state or raise max_bytes"
        )
        self.size = size
        self.limit = limit


class CorruptCheckpoint(CheckpointError):
    """Stored checkpoint data that cannot be decoded (truncated or overwritten)."""


class StoreUnavailable(CheckpointError):
    """The checkpoint store (KV, staging or blob tier) cannot be reached or written."""


class BadStoreURL(CheckpointError, ValueError):
    """A checkpoint store URL that cannot be parsed or names an unknown backend."""
