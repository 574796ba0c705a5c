"""The DiSDeL job request: what to train, on which data, and how far.

A job is a YAML/JSON document validated by :class:`JobRequest`; every field error is
reported with its path (``dataset.shape: ...``) so a bad file gets one clear message.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

ModelName = Literal["small_cnn", "mobilenet", "resnet"]


class JobError(ValueError):
    """A job request that cannot be used, with a message meant for the user."""


class SyntheticDataset(BaseModel):
    """A generated, learnable image-classification dataset (no download needed)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["synthetic"] = "synthetic"
    samples: int = Field(ge=2, le=2_000_000)
    shape: tuple[int, int, int] = Field(description="height, width, channels of one sample")
    classes: int = Field(ge=2, le=10_000)
    seed: int = 0
    noise: float = Field(0.35, ge=0.0, le=10.0, description="std-dev of the noise around each class prototype")

    @field_validator("shape")
    @classmethod
    def _positive(cls, shape: tuple[int, int, int]) -> tuple[int, int, int]:
        if min(shape) < 1 or shape[0] < 8 or shape[1] < 8:
            raise ValueError("shape must be (height>=8, width>=8, channels>=1)")
        return shape


class NpzDataset(BaseModel):
    """A ``.npz`` file holding ``x`` (N, H, W, C) and integer labels ``y`` (N,)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["npz"] = "npz"
    path: Path

    @field_validator("path")
    @classmethod
    def _exists(cls, path: Path) -> Path:
        path = path.expanduser()
        if path.suffix != ".npz":
            raise ValueError(f"{path} is not a .npz file")
        if not path.is_file():
            raise ValueError(f"{path} does not exist")
        return path.resolve()


Dataset = Annotated[SyntheticDataset | NpzDataset, Field(discriminator="kind")]


class JobRequest(BaseModel):
    """One training job as a user submits it."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    name: str = Field("job", pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
    model: ModelName
    dataset: Dataset
    batch_size: int = Field(ge=1, le=65_536)
    epochs: int = Field(ge=1, le=10_000)
    target_loss: float = Field(0.0, ge=0.0, description="ε: an action stops early once its loss is <= ε")
    expected_cost: float | None = Field(None, gt=0, description="e_cost, in the unit of the price μ")
    eval_samples: int | None = Field(None, ge=1, description="held out for the final loss; default min(1000, 10%)")
    learning_rate: float = Field(1e-3, gt=0, le=10)
    seed: int = 0
    actions: int | None = Field(None, ge=2, le=256, description="force c_d instead of planning it")

    @model_validator(mode="after")
    def _enough_data(self) -> "JobRequest":
        if isinstance(self.dataset, SyntheticDataset):
            held_out = self.held_out(self.dataset.samples)
            if self.dataset.samples - held_out < (self.actions or 2):
                raise ValueError(f"{self.dataset.samples} samples leave too few for training after {held_out} held out")
        return self

    def held_out(self, samples: int) -> int:
        """Samples kept for evaluating the final model (the last ones of the dataset)."""
        return self.eval_samples if self.eval_samples is not None else max(1, min(1000, samples // 10))

    def signature(self) -> str:
        """Identity of (model, data, batch) used to look up execution history."""
        data = self.dataset.model_dump(mode="json")
        if isinstance(self.dataset, NpzDataset):
            stat = self.dataset.path.stat()
            data = {"path": str(self.dataset.path), "size": stat.st_size, "mtime": int(stat.st_mtime)}
        blob = json.dumps({"model": self.model, "data": data, "batch": self.batch_size}, sort_keys=True)
        return f"{self.model}-b{self.batch_size}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def _explain(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "job"
        lines.append(f"{where}: {error['msg']}")
    return "invalid job request:\n  " + "\n  ".join(lines)


def parse_job(data: object) -> JobRequest:
    """Validate a decoded job document; raises :class:`JobError` listing every problem."""
    if isinstance(data, JobRequest):
        return data
    if not isinstance(data, dict):
        raise JobError(f"invalid job request: expected a mapping, got {type(data).__name__}")
    try:
        return JobRequest.model_validate(data)
    except ValidationError as exc:
        raise JobError(_explain(exc)) from None


def load_job(path: str | Path) -> JobRequest:
    """Read and validate a YAML (or JSON) job file; relative dataset paths are relative to it."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise JobError(f"cannot read job file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise JobError(f"job file {path} is not valid YAML: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("dataset"), dict) and "path" in data["dataset"]:
        data["dataset"]["path"] = str(path.parent / Path(data["dataset"]["path"]).expanduser())
    return parse_job(data)
