"""DiSDeL: memory/timeout estimation and data-parallel DL training over serverless actions.

Public API: :func:`submit`, :func:`status`, :func:`estimate`, :class:`JobRequest`.
Imports are lazy so ``import owx.disdel`` stays light (no TensorFlow).
"""

from __future__ import annotations

from typing import Any

__all__ = ["JobHandle", "JobRequest", "estimate", "load_job", "status", "submit"]


def __getattr__(name: str) -> Any:
    if name in ("submit", "status", "estimate", "JobHandle"):
        from owx.disdel import sdk

        return getattr(sdk, name)
    if name in ("JobRequest", "load_job"):
        from owx.disdel import job

        return getattr(job, name)
    raise AttributeError(name)
