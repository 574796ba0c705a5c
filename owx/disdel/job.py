"""The DiSDeL job request: what to train (a named model, a ``.keras`` file or a Python
function), on which data (synthetic, npz, CSV, an image folder or TFRecord files), and how far.

A job is a YAML/JSON document validated by :class:`JobRequest`; every field error is
reported with its path (``dataset.shape: ...``) so a bad file gets one clear message.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

ModelName = Literal["small_cnn", "mobilenet", "resnet"]


class JobError(ValueError):
    """A job request that cannot be used, with a message meant for the user."""


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SyntheticDataset(_Spec):
    """A generated, learnable image-classification dataset (no download needed)."""

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


def _existing(path: Path, suffixes: tuple[str, ...] = (), directory: bool = False) -> Path:
    path = path.expanduser()
    if suffixes and path.suffix not in suffixes:
        raise ValueError(f"{path} is not a {' or '.join(suffixes)} file")
    if not (path.is_dir() if directory else path.is_file()):
        raise ValueError(f"{path} does not exist" + (" or is not a folder" if directory else ""))
    return path.resolve()


def _exists(path: Path) -> Path:
    path = path.expanduser()
    if not path.exists():
        raise ValueError(f"{path} does not exist")
    return path.resolve()


NpzFile = Annotated[Path, AfterValidator(lambda p: _existing(p, (".npz",)))]
CsvFile = Annotated[Path, AfterValidator(lambda p: _existing(p, (".csv",)))]
KerasFile = Annotated[Path, AfterValidator(lambda p: _existing(p, (".keras",)))]
Folder = Annotated[Path, AfterValidator(lambda p: _existing(p, directory=True))]
FileOrFolder = Annotated[Path, AfterValidator(_exists)]


class NpzDataset(_Spec):
    """A ``.npz`` file holding ``x`` (N, ...) and labels or targets ``y`` (N,)."""

    kind: Literal["npz"] = "npz"
    path: NpzFile


class CsvDataset(_Spec):
    """A CSV file with a header row: numeric feature columns and one label column."""

    kind: Literal["csv"] = "csv"
    path: CsvFile
    label: str = Field(description="the label column: integers are classes, other numbers regression targets")
    features: list[str] | None = Field(None, min_length=1, description="feature columns; default every other column")


class ImageFolderDataset(_Spec):
    """A folder with one subfolder of images (PNG, JPEG, BMP, GIF) per class."""

    kind: Literal["images"] = "images"
    path: Folder
    image_size: tuple[int, int] | None = Field(None, description="height, width; default the first image's")
    color: Literal["rgb", "grayscale"] = "rgb"
    scale: bool = Field(True, description="pixels to [0, 1]")


class TFRecordDataset(_Spec):
    """TFRecord files of ``tf.train.Example`` records: one feature holds the sample, one the label."""

    kind: Literal["tfrecord"] = "tfrecord"
    path: FileOrFolder = Field(description="one file, or a folder whose *.tfrecord files are read in name order")
    feature: str = "x"
    shape: tuple[int, ...] = Field(min_length=1, description="shape of one sample")
    encoding: Literal["float", "int", "image"] = Field("float", description="float or int64 list, or encoded image bytes")
    label: str = "y"


Dataset = Annotated[SyntheticDataset | NpzDataset | CsvDataset | ImageFolderDataset | TFRecordDataset,
                    Field(discriminator="kind")]


class BuiltinModel(_Spec):
    """One of owx's named models, sized to the data."""

    kind: Literal["builtin"] = "builtin"
    name: ModelName


class KerasFileModel(_Spec):
    """A model saved with ``model.save("name.keras")``, compiled or not."""

    kind: Literal["keras"] = "keras"
    path: KerasFile


class FunctionModel(_Spec):
    """``module:function`` returning a ``keras.Model``; the module lives in ``folder`` (the job's)."""

    kind: Literal["function"] = "function"
    function: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*:[A-Za-z_][A-Za-z0-9_]*$")
    folder: Path = Field(Path("."), description="where the module is: module.py or a package folder")

    @model_validator(mode="after")
    def _module_exists(self) -> "FunctionModel":
        module = self.function.split(":")[0]
        self.folder = self.folder.expanduser().resolve()
        if not ((self.folder / f"{module}.py").is_file() or (self.folder / module / "__init__.py").is_file()):
            raise ValueError(f"no module {module} ({module}.py or {module}/) in {self.folder}")
        return self

    @property
    def module_path(self) -> Path:
        module = self.function.split(":")[0]
        single = self.folder / f"{module}.py"
        return single if single.is_file() else self.folder / module


ModelSpec = Annotated[BuiltinModel | KerasFileModel | FunctionModel, Field(discriminator="kind")]


def _file_identity(path: Path) -> dict[str, object]:
    stat = path.stat()
    return {"path": str(path), "size": stat.st_size, "mtime": int(stat.st_mtime)}


class JobRequest(BaseModel):
    """One training job as a user submits it."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    name: str = Field("job", pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
    model: ModelSpec
    dataset: Dataset
    batch_size: int = Field(ge=1, le=65_536)
    epochs: int = Field(ge=1, le=10_000)
    target_loss: float = Field(0.0, ge=0.0, description="ε: an action stops early once its loss is <= ε")
    expected_cost: float | None = Field(None, gt=0, description="e_cost, in the unit of the price μ")
    eval_samples: int | None = Field(None, ge=1, description="held out for the final loss; default min(1000, 10%)")
    learning_rate: float = Field(1e-3, gt=0, le=10)
    seed: int = 0
    actions: int | None = Field(None, ge=2, le=256, description="force c_d instead of planning it")

    @field_validator("model", mode="before")
    @classmethod
    def _named(cls, model: object) -> object:
        return {"kind": "builtin", "name": model} if isinstance(model, str) else model

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

    @property
    def model_label(self) -> str:
        """A short name of the model for messages and signatures."""
        model = self.model
        if isinstance(model, BuiltinModel):
            return model.name
        return model.path.stem if isinstance(model, KerasFileModel) else model.function.replace(":", ".")

    def signature(self) -> str:
        """Identity of (model, data, batch) used to look up execution history."""
        data = self.dataset.model_dump(mode="json")
        if hasattr(self.dataset, "path") and self.dataset.path.is_file():
            data = {**data, **_file_identity(self.dataset.path)}
        model = self.model.model_dump(mode="json")
        if isinstance(self.model, KerasFileModel):
            model = {**model, **_file_identity(self.model.path)}
        elif isinstance(self.model, FunctionModel):
            module = self.model.module_path
            model = {**model, **_file_identity(module if module.is_file() else module / "__init__.py")}
        blob = json.dumps({"model": model, "data": data, "batch": self.batch_size}, sort_keys=True)
        return f"{self.model_label}-b{self.batch_size}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


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
    """Read and validate a YAML (or JSON) job file; relative paths in it are relative to its folder."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise JobError(f"cannot read job file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise JobError(f"job file {path} is not valid YAML: {exc}") from None
    if isinstance(data, dict):
        for section, key in (("dataset", "path"), ("model", "path"), ("model", "folder")):
            part = data.get(section)
            if isinstance(part, dict) and (key in part or (section, key) == ("model", "folder")):
                if key == "folder" and part.get("kind") != "function":
                    continue
                part[key] = str(path.parent / Path(str(part.get(key, "."))).expanduser())
    return parse_job(data)
