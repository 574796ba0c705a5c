"""Canary checkpoints: the API actions call, and the store behind it.

Inside an action::

    from owx.canary.checkpoint import Checkpointer

    with Checkpointer.from_env() as ckpt:
        values = ckpt.restore() or {"step": 0}
        ...
        ckpt.save("step-10", step=10)

On the platform side, :func:`open_checkpoint_store` opens a :class:`CheckpointStore` from
its URL (``sqlite:///…``, ``redis://…``, ``ignite://…``). Everything here is stdlib-only
except the Redis and Ignite backends, whose client packages load with their URL.
"""

from __future__ import annotations

from owx.canary.checkpoint.api import (
    ENV_FUNCTION_ID,
    ENV_INTERVAL,
    ENV_STORE,
    WARNING_PREFIX,
    Checkpointer,
    close_all,
)
from owx.canary.checkpoint.errors import (
    BadStoreURL,
    CheckpointError,
    CheckpointTooLarge,
    CorruptCheckpoint,
    InvalidCheckpoint,
    StoreUnavailable,
)
from owx.canary.checkpoint.model import BlobRef, Checkpoint, CheckpointInfo
from owx.canary.checkpoint.options import StoreOptions
from owx.canary.checkpoint.store import CheckpointStore
from owx.canary.checkpoint.url import open_checkpoint_store

__all__ = [
    "ENV_FUNCTION_ID", "ENV_INTERVAL", "ENV_STORE", "WARNING_PREFIX",
    "BadStoreURL", "BlobRef", "Checkpoint", "CheckpointError", "CheckpointInfo", "CheckpointStore",
    "CheckpointTooLarge", "Checkpointer", "CorruptCheckpoint", "InvalidCheckpoint", "StoreOptions",
    "StoreUnavailable", "close_all", "open_checkpoint_store",
]
