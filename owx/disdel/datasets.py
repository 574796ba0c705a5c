"""Reading a job's dataset into arrays: npz, CSV, an image folder or TFRecord files, with tf.data.

Every reader returns ``x`` (N, ...) and ``y`` (N,): integer class labels (int32) or
real-valued targets (float32).  The controller reads the data once and writes the
actions' shards (:func:`owx.disdel.data.write_shards`); actions never parse the
user's format.  Errors name the file and what is wrong with it.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import numpy as np

from owx.disdel.job import CsvDataset, ImageFolderDataset, JobError, NpzDataset, SyntheticDataset, TFRecordDataset

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif")


def _tf() -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    return tf


def labels(y: np.ndarray, where: object) -> np.ndarray:
    """Integer-valued labels as int32 classes (non-negative), anything else as float32 targets."""
    if y.size and np.issubdtype(y.dtype, np.number) and np.all(np.mod(y, 1) == 0):
        if y.min() < 0:
            raise JobError(f"{where}: class labels must be non-negative integers")
        return y.astype(np.int32)
    if not np.issubdtype(y.dtype, np.number):
        raise JobError(f"{where}: labels must be numbers, got {y.dtype}")
    return y.astype(np.float32)


def classes_of(y: np.ndarray) -> int | None:
    """How many classes integer labels name (at least 2); None for regression targets."""
    return max(2, int(y.max()) + 1) if np.issubdtype(y.dtype, np.integer) and y.size else None


def read_npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        with np.load(path) as archive:
            if "x" not in archive or "y" not in archive:
                raise JobError(f"{path}: a dataset file needs arrays 'x' and 'y', found {sorted(archive.files)}")
            x, y = archive["x"], archive["y"]
    except (OSError, ValueError) as exc:
        raise JobError(f"{path}: not a readable .npz dataset ({exc})") from None
    if x.ndim < 2 or y.ndim != 1 or len(x) != len(y):
        raise JobError(f"{path}: need x of shape (N, ...) and y of shape (N,), got {x.shape} and {y.shape}")
    if np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float32, copy=False)
    return x, labels(y, path)


def read_csv(spec: CsvDataset) -> tuple[np.ndarray, np.ndarray]:
    with open(spec.path, newline="") as handle:
        header = next(csv.reader(handle), None)
    if not header:
        raise JobError(f"{spec.path}: empty CSV file (a header row is needed)")
    header = [name.strip() for name in header]
    features = spec.features or [name for name in header if name != spec.label]
    missing = [name for name in [spec.label, *features] if name not in header]
    if missing:
        raise JobError(f"{spec.path}: no column {', '.join(missing)} (columns: {', '.join(header)})")
    tf = _tf()
    columns = [header.index(name) for name in features]
    dataset = tf.data.experimental.CsvDataset(str(spec.path), [tf.float32] * (len(columns) + 1), header=True,
                                              select_cols=sorted([*columns, header.index(spec.label)]))
    order = sorted([*columns, header.index(spec.label)])
    try:
        rows = np.array([[float(v) for v in row] for row in dataset.as_numpy_iterator()], dtype=np.float64)
    except tf.errors.InvalidArgumentError as exc:
        raise JobError(f"{spec.path}: every feature and label must be a number ({exc.message.splitlines()[0]})") from None
    if rows.size == 0:
        raise JobError(f"{spec.path}: no data rows")
    x = rows[:, [order.index(c) for c in columns]].astype(np.float32)
    return x, labels(rows[:, order.index(header.index(spec.label))], spec.path)


def read_images(spec: ImageFolderDataset) -> tuple[np.ndarray, np.ndarray]:
    """Every image resized to ``image_size`` (default the first one's), in a fixed shuffled order."""
    classes = sorted(p.name for p in spec.path.iterdir() if p.is_dir())
    files = [(f, index) for index, name in enumerate(classes)
             for f in sorted((spec.path / name).iterdir()) if f.suffix.lower() in IMAGE_SUFFIXES]
    if len(classes) < 2 or not files:
        raise JobError(f"{spec.path}: need one subfolder of images per class (at least two), found {classes or 'none'}")
    tf = _tf()
    channels = 3 if spec.color == "rgb" else 1

    def decode(path: Any) -> Any:
        return tf.cast(tf.io.decode_image(tf.io.read_file(path), channels=channels, expand_animations=False), tf.float32)

    try:
        size = spec.image_size or tuple(int(d) for d in decode(str(files[0][0])).shape[:2])
        paths = tf.data.Dataset.from_tensor_slices([str(f) for f, _ in files])
        images = list(paths.map(lambda p: tf.image.resize(decode(p), size)).as_numpy_iterator())
    except tf.errors.InvalidArgumentError as exc:
        raise JobError(f"{spec.path}: an image cannot be decoded ({exc.message.splitlines()[0]})") from None
    x = np.stack(images).astype(np.float32)
    if spec.scale:
        x /= 255.0
    order = np.random.default_rng(0).permutation(len(files))  # folders group the classes: mix them for the shards
    return x[order], np.array([index for _, index in files], dtype=np.int32)[order]


def _tfrecord_files(path: Path) -> list[str]:
    files = sorted(str(p) for p in path.glob("*.tfrecord")) if path.is_dir() else [str(path)]
    if not files:
        raise JobError(f"{path}: no *.tfrecord files")
    return files


def read_tfrecord(spec: TFRecordDataset) -> tuple[np.ndarray, np.ndarray]:
    tf = _tf()
    size = int(np.prod(spec.shape))
    if spec.encoding == "image":
        feature = tf.io.FixedLenFeature([], tf.string)
    else:
        feature = tf.io.FixedLenFeature([size], tf.float32 if spec.encoding == "float" else tf.int64)
    records = tf.data.TFRecordDataset(_tfrecord_files(spec.path))
    try:
        first = tf.train.Example.FromString(next(iter(records.take(1))).numpy())
        integer_labels = first.features.feature[spec.label].WhichOneof("kind") == "int64_list"
        schema = {spec.feature: feature,
                  spec.label: tf.io.FixedLenFeature([], tf.int64 if integer_labels else tf.float32)}

        def parse(record: Any) -> tuple[Any, Any]:
            example = tf.io.parse_single_example(record, schema)
            value = example[spec.feature]
            if spec.encoding == "image":
                value = tf.io.decode_image(value, channels=spec.shape[-1], expand_animations=False)
                value = tf.cast(value, tf.float32) / 255.0
            return tf.reshape(value, spec.shape), example[spec.label]

        pairs = list(records.map(parse).as_numpy_iterator())
    except StopIteration:
        pairs = []
    except (tf.errors.OpError, ValueError) as exc:
        message = getattr(exc, "message", str(exc)).splitlines()[0]
        raise JobError(f"{spec.path}: cannot read {spec.feature!r} of shape {spec.shape} and {spec.label!r} "
                       f"({message})") from None
    if not pairs:
        raise JobError(f"{spec.path}: no records")
    x = np.stack([p[0] for p in pairs])
    x = x.astype(np.int32) if spec.encoding == "int" else x.astype(np.float32)
    return x, labels(np.array([p[1] for p in pairs]), spec.path)


def read(spec: object) -> tuple[np.ndarray, np.ndarray]:
    """``x`` and ``y`` of any dataset a job can name."""
    from owx.disdel.data import synthetic

    if isinstance(spec, SyntheticDataset):
        return synthetic(spec)
    if isinstance(spec, NpzDataset):
        return read_npz(spec.path)
    if isinstance(spec, CsvDataset):
        return read_csv(spec)
    if isinstance(spec, ImageFolderDataset):
        return read_images(spec)
    if isinstance(spec, TFRecordDataset):
        return read_tfrecord(spec)
    raise JobError(f"unknown dataset {spec!r}")
